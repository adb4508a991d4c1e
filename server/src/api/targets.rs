//! `/api/v1/targets`: every target with live runs or settings, and the
//! operator's settings of one target (pause, capacity). A target's name
//! travels in the body: names like `db/orders` hold slashes, which the
//! sign-in guard refuses encoded in a path.

use axum::Json;
use axum::extract::State;
use domain::model::{PausedView, TargetView};
use serde::Deserialize;

use super::json_body::JsonBody;
use super::operator::Operator;
use super::{ApiError, ApiResult, ApiState};
use domain::time::Ts;

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
    /// Null removes the capacity; missing is refused, not read as null (a
    /// body that forgot it had removed the target's capacity).
    #[serde(default, deserialize_with = "present")]
    pub capacity: Option<Option<i64>>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<i64>>, D::Error> {
    Option::<i64>::deserialize(d).map(Some)
}

/// The target's name, as a plan's targets are checked: refused here with
/// its field named, rather than by the store without one.
fn target_name(target: &str) -> ApiResult<String> {
    crate::plan::name_text(target.to_owned(), "target").map_err(ApiError::from)
}

/// The target as it now stands: with no runs and no settings left (a
/// resume, a capacity removed), a view of nothing, not a 404 for an
/// action that worked.
async fn view_of(state: &ApiState, target: &str) -> ApiResult<Json<TargetView>> {
    let found = state
        .store
        .target_list()
        .await?
        .into_iter()
        .find(|t| t.target == target);
    Ok(Json(
        found.unwrap_or_else(|| TargetView::idle(target.to_owned())),
    ))
}

/// `POST /api/v1/targets/pause` `{"target": "db/orders"}`.
pub async fn pause(
    State(state): State<ApiState>,
    Operator(who): Operator,
    JsonBody(body): JsonBody<TargetName>,
) -> ApiResult<Json<TargetView>> {
    let target = target_name(&body.target)?;
    state
        .store
        .target_pause(&target, (&who).into(), Ts::now())
        .await?;
    view_of(&state, &target).await
}

/// `POST /api/v1/targets/resume` `{"target": "db/orders"}`.
pub async fn resume(
    State(state): State<ApiState>,
    Operator(who): Operator,
    JsonBody(body): JsonBody<TargetName>,
) -> ApiResult<Json<TargetView>> {
    let target = target_name(&body.target)?;
    state
        .store
        .target_resume(&target, (&who).into(), Ts::now())
        .await?;
    view_of(&state, &target).await
}

/// `POST /api/v1/targets/capacity` `{"target": "db/orders", "capacity": 2}`.
pub async fn capacity(
    State(state): State<ApiState>,
    Operator(who): Operator,
    JsonBody(body): JsonBody<TargetCapacity>,
) -> ApiResult<Json<TargetView>> {
    let target = target_name(&body.target)?;
    let Some(capacity) = body.capacity else {
        return Err(ApiError::invalid(
            "capacity",
            "capacity is required: a number of runs, or null to remove the target's capacity",
        ));
    };
    state
        .store
        .target_capacity_set(&target, capacity, (&who).into(), Ts::now())
        .await
        .map_err(|e| match e {
            crate::store::StoreError::Invalid(message) => ApiError::invalid("capacity", message),
            other => other.into(),
        })?;
    view_of(&state, &target).await
}
