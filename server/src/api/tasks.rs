//! `/api/v1/tasks/{id}/…`: actions on one task; each answers with the
//! updated plan.

use app::model::PlanView;
use axum::Json;
use axum::extract::{Path, State};

use super::error::parse_id;
use super::{ApiResult, ApiState};
use crate::auth::Operator;
use crate::store::Ts;

pub async fn retry(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> ApiResult<Json<PlanView>> {
    let plan_id = state
        .store
        .task_retry(parse_id(&id, "task")?, &who.name, Ts::now())
        .await?;
    Ok(Json(state.store.plan_get(plan_id).await?))
}

pub async fn cancel(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> ApiResult<Json<PlanView>> {
    let plan_id = state
        .store
        .task_cancel(parse_id(&id, "task")?, &who.name, Ts::now())
        .await?;
    Ok(Json(state.store.plan_get(plan_id).await?))
}

pub async fn skip(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> ApiResult<Json<PlanView>> {
    let plan_id = state
        .store
        .task_skip(parse_id(&id, "task")?, &who.name, Ts::now())
        .await?;
    Ok(Json(state.store.plan_get(plan_id).await?))
}
