//! How replicas (and agents) look from outside: alive (heartbeat fresher than
//! `stale_after`) and leader (holds an unexpired lease). The REST API and
//! the dashboard both answer with this.

use std::time::Duration;

use domain::model::{ReplicaView, WorkerKind};

use crate::store::{self, LEADER_LEASE, Store};
use domain::time::Ts;

pub async fn replica_views(
    store: &dyn Store,
    stale_after: Duration,
    now: Ts,
) -> store::Result<Vec<ReplicaView>> {
    let live_since = now.minus(stale_after);
    let replicas = store.replica_list().await?;
    let leader = store
        .lease_get(LEADER_LEASE)
        .await?
        .filter(|lease| lease.expires_at > now)
        .map(|lease| lease.holder);
    Ok(replicas
        .into_iter()
        .map(|r| ReplicaView {
            alive: r.last_heartbeat >= live_since,
            leader: leader.as_deref() == Some(r.info.replica_id.as_str()),
            kind: WorkerKind::of(&r.info.replica_id),
            replica_id: r.info.replica_id,
            hostname: r.info.hostname,
            labels: r.info.labels,
            version: r.info.version,
            started_at: r.info.started_at.0,
            last_heartbeat: r.last_heartbeat.0,
            clock_skew_ms: r.clock_skew_ms,
            running: r.running,
            draining_since: r.draining.as_ref().map(|(since, _)| since.0),
            draining_by: r.draining.map(|(_, by)| by),
        })
        .collect())
}
