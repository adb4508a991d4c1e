//! `GET /api/v1/replicas`: every replica and agent with a heartbeat row;
//! `POST /api/v1/replicas/{id}/drain` and `/resume`: an operator takes one
//! out of service and back (docs/agents.md, "Draining").

use axum::Json;
use axum::extract::{Path, State};
use domain::model::ReplicaView;

use super::operator::Operator;
use super::{ApiError, ApiResult, ApiState};
use crate::replica_views::replica_views;
use domain::time::Ts;

pub async fn list(State(state): State<ApiState>) -> ApiResult<Json<Vec<ReplicaView>>> {
    let views = replica_views(state.store.as_ref(), state.stale_after, Ts::now()).await?;
    Ok(Json(views))
}

/// `POST /api/v1/replicas/{id}/drain`: the worker takes no new run and
/// finishes those it has; the answer is the worker as it now stands.
pub async fn drain(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> ApiResult<Json<ReplicaView>> {
    steer(&state, &who, &id, true).await
}

/// `POST /api/v1/replicas/{id}/resume`: lifts a drain.
pub async fn resume(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> ApiResult<Json<ReplicaView>> {
    steer(&state, &who, &id, false).await
}

async fn steer(
    state: &ApiState,
    who: &domain::model::Identity,
    id: &str,
    drain: bool,
) -> ApiResult<Json<ReplicaView>> {
    let found = state
        .store
        .replica_drain(id, drain, who.into(), Ts::now())
        .await?;
    let gone = || {
        ApiError::NotFound(format!(
            "no replica or agent `{}` has a heartbeat row (GET /api/v1/replicas lists them)",
            domain::audit::client_text(id)
        ))
    };
    if !found {
        return Err(gone());
    }
    replica_views(state.store.as_ref(), state.stale_after, Ts::now())
        .await?
        .into_iter()
        .find(|r| r.replica_id == id)
        .map(Json)
        .ok_or_else(gone)
}
