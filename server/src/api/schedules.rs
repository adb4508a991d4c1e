//! `/api/v1/schedules`: recurring plans. Create, edit, pause, resume,
//! trigger and delete are the operator's; anyone signed in may read.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use domain::model::{PlanView, ScheduleView};

use super::error::parse_id;
use super::operator::Operator;
use super::{ApiResult, ApiState};
use crate::plan::InvalidPlan;
use crate::schedule::{self, NewSchedule};
use domain::time::Ts;

/// A schedule file from the body: JSON, or YAML when the Content-Type
/// says so; its template must pass this server's command policy.
fn parse(state: &ApiState, headers: &HeaderMap, body: &Bytes) -> ApiResult<NewSchedule> {
    let new = match super::yaml_body(headers, body)? {
        Some(text) => schedule::parse_yaml(text)?,
        None => schedule::parse_json(body)?,
    };
    let sample = new.timing.next_after(Ts::now()).unwrap_or_else(Ts::now);
    state
        .commands
        .check(&new.plan_at(sample)?)
        .map_err(|e| InvalidPlan {
            field: e.field.map(|f| format!("plan.{f}")),
            ..e
        })?;
    Ok(new)
}

/// `POST /api/v1/schedules`.
pub async fn create(
    State(state): State<ApiState>,
    Operator(who): Operator,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<ScheduleView>)> {
    let new = parse(&state, &headers, &body)?;
    let id = state
        .store
        .schedule_create(&new, (&who).into(), Ts::now())
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(state.store.schedule_get(id).await?),
    ))
}

/// `GET /api/v1/schedules`.
pub async fn list(State(state): State<ApiState>) -> ApiResult<Json<Vec<ScheduleView>>> {
    Ok(Json(state.store.schedule_list().await?))
}

/// `GET /api/v1/schedules/{id}`.
pub async fn get(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> ApiResult<Json<ScheduleView>> {
    let id = parse_id(&id, "schedule")?;
    Ok(Json(state.store.schedule_get(id).await?))
}

/// `PUT /api/v1/schedules/{id}`: the whole schedule file again.
pub async fn update(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<ScheduleView>> {
    let id = parse_id(&id, "schedule")?;
    let new = parse(&state, &headers, &body)?;
    state
        .store
        .schedule_update(id, &new, (&who).into(), Ts::now())
        .await?;
    Ok(Json(state.store.schedule_get(id).await?))
}

/// `DELETE /api/v1/schedules/{id}`: its plans stay.
pub async fn delete(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = parse_id(&id, "schedule")?;
    state
        .store
        .schedule_delete(id, (&who).into(), Ts::now())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/v1/schedules/{id}/pause`.
pub async fn pause(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> ApiResult<Json<ScheduleView>> {
    let id = parse_id(&id, "schedule")?;
    state
        .store
        .schedule_pause(id, (&who).into(), Ts::now())
        .await?;
    Ok(Json(state.store.schedule_get(id).await?))
}

/// `POST /api/v1/schedules/{id}/resume`: from the next tick after now.
pub async fn resume(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> ApiResult<Json<ScheduleView>> {
    let id = parse_id(&id, "schedule")?;
    state
        .store
        .schedule_resume(id, (&who).into(), Ts::now())
        .await?;
    Ok(Json(state.store.schedule_get(id).await?))
}

/// `POST /api/v1/schedules/{id}/trigger`: a plan now, started whatever
/// the overlap policy; answers the plan.
pub async fn trigger(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<PlanView>)> {
    let id = parse_id(&id, "schedule")?;
    let plan = state
        .store
        .schedule_trigger(id, (&who).into(), Ts::now())
        .await?;
    Ok((StatusCode::CREATED, Json(state.store.plan_get(plan).await?)))
}
