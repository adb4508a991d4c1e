//! `GET /api/v1/replicas`: every replica with a heartbeat row.

use app::model::ReplicaView;
use axum::Json;
use axum::extract::State;

use super::{ApiResult, ApiState};
use crate::store::{LEADER_LEASE, Ts};

pub async fn list(State(state): State<ApiState>) -> ApiResult<Json<Vec<ReplicaView>>> {
    let now = Ts::now();
    let live_since = now.minus(state.stale_after);
    let replicas = state.store.replica_list().await?;
    let leader = state
        .store
        .lease_get(LEADER_LEASE)
        .await?
        .filter(|lease| lease.expires_at > now)
        .map(|lease| lease.holder);
    let views = replicas
        .into_iter()
        .map(|r| ReplicaView {
            alive: r.last_heartbeat >= live_since,
            leader: leader.as_deref() == Some(r.info.replica_id.as_str()),
            replica_id: r.info.replica_id,
            hostname: r.info.hostname,
            labels: r.info.labels,
            version: r.info.version,
            started_at: r.info.started_at.0,
            last_heartbeat: r.last_heartbeat.0,
            running: r.running,
        })
        .collect();
    Ok(Json(views))
}
