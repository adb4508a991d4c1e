//! `GET /api/v1/replicas`: every replica with a heartbeat row.

use app::model::ReplicaView;
use axum::Json;
use axum::extract::State;

use super::{ApiResult, ApiState};
use crate::store::{Backend, Ts};

pub async fn list(State(state): State<ApiState>) -> ApiResult<Json<Vec<ReplicaView>>> {
    let live_since = Ts::now().minus(state.stale_after);
    let replicas = state.store.replica_list().await?;
    let single_process = state.store.backend() == Backend::Sqlite;
    let views = replicas
        .into_iter()
        .map(|r| ReplicaView {
            alive: r.last_heartbeat >= live_since,
            // On SQLite the single process leads. On PostgreSQL, until the
            // leader lease lands, replicas promote in turn under an advisory
            // lock and none holds a standing leadership.
            leader: single_process,
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
