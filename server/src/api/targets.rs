//! `/api/v1/targets`: every target with live runs or settings, and the
//! operator's settings of one target (pause, capacity). A target's name
//! travels in the body: names like `db/orders` hold slashes, which the
//! sign-in guard refuses encoded in a path.

use app::model::{PausedView, TargetView};
use axum::Json;
use axum::extract::State;
use serde::Deserialize;

use super::json_body::JsonBody;
use super::{ApiError, ApiResult, ApiState};
use crate::auth::Operator;
use crate::store::Ts;

/// `GET /api/v1/targets`.
pub async fn list(State(state): State<ApiState>) -> ApiResult<Json<Vec<TargetView>>> {
    Ok(Json(state.store.target_list().await?))
}

/// `GET /api/v1/paused`: every paused plan and target.
pub async fn paused(State(state): State<ApiState>) -> ApiResult<Json<PausedView>> {
    Ok(Json(state.store.paused_list().await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetName {
    pub target: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetCapacity {
    pub target: String,
    /// Null removes the capacity.
    pub capacity: Option<i64>,
}

/// The target as it now stands.
async fn view_of(state: &ApiState, target: &str) -> ApiResult<Json<TargetView>> {
    let target = target.trim();
    state
        .store
        .target_list()
        .await?
        .into_iter()
        .find(|t| t.target == target)
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("target {target} has no runs or settings")))
}

/// `POST /api/v1/targets/pause` `{"target": "db/orders"}`.
pub async fn pause(
    State(state): State<ApiState>,
    Operator(who): Operator,
    JsonBody(body): JsonBody<TargetName>,
) -> ApiResult<Json<TargetView>> {
    state
        .store
        .target_pause(&body.target, (&who).into(), Ts::now())
        .await?;
    view_of(&state, &body.target).await
}

/// `POST /api/v1/targets/resume` `{"target": "db/orders"}`.
pub async fn resume(
    State(state): State<ApiState>,
    Operator(who): Operator,
    JsonBody(body): JsonBody<TargetName>,
) -> ApiResult<Json<TargetView>> {
    state
        .store
        .target_resume(&body.target, (&who).into(), Ts::now())
        .await?;
    view_of(&state, &body.target).await
}

/// `POST /api/v1/targets/capacity` `{"target": "db/orders", "capacity": 2}`.
pub async fn capacity(
    State(state): State<ApiState>,
    Operator(who): Operator,
    JsonBody(body): JsonBody<TargetCapacity>,
) -> ApiResult<Json<TargetView>> {
    state
        .store
        .target_capacity_set(&body.target, body.capacity, (&who).into(), Ts::now())
        .await?;
    view_of(&state, &body.target).await
}
