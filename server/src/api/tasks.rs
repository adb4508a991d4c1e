//! `/api/v1/tasks/{id}/…`: actions on one task; each answers with the
//! updated plan.

use axum::Json;
use axum::extract::{Path, State};
use domain::model::PlanView;

use domain::views::Action;

use super::operator::Operator;
use super::{ApiResult, ApiState};

pub async fn retry(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> ApiResult<Json<PlanView>> {
    super::act(&state, &who, Action::TaskRetry, &id).await
}

pub async fn cancel(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> ApiResult<Json<PlanView>> {
    super::act(&state, &who, Action::TaskCancel, &id).await
}

pub async fn skip(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> ApiResult<Json<PlanView>> {
    super::act(&state, &who, Action::TaskSkip, &id).await
}

pub async fn approve(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> ApiResult<Json<PlanView>> {
    super::act(&state, &who, Action::TaskApprove, &id).await
}
