//! `GET /api/v1/replicas`: every replica with a heartbeat row.

use axum::Json;
use axum::extract::State;
use domain::model::ReplicaView;

use super::{ApiResult, ApiState};
use crate::replica_views::replica_views;
use domain::time::Ts;

pub async fn list(State(state): State<ApiState>) -> ApiResult<Json<Vec<ReplicaView>>> {
    let views = replica_views(state.store.as_ref(), state.stale_after, Ts::now()).await?;
    Ok(Json(views))
}
