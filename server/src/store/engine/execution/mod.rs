//! What a replica does with the runs it executes: claim them and beat their
//! heartbeats (log lines go straight to the dialect's `log_append`). The
//! statements are the dialect's own, the hottest of the store; the rules
//! around them live here; a run's end (finish, sweep, hand back) is
//! `endings.rs`, and what follows it (retry, notification) `outcomes.rs`.

pub mod endings;
pub mod outcomes;

use std::time::Duration;

use crate::store::engine::Dialect;
use crate::store::engine::gates::dependencies;
use crate::store::engine::reads::rows::ClaimRow;
use crate::store::{Beaten, Claim, ClaimedRun, Result};
use domain::time::Ts;

/// Claims up to `claim.limit` AVAILABLE runs this replica may execute,
/// oldest first.
pub async fn run_claim_many<D: Dialect>(
    d: &D,
    claim: &Claim<'_>,
    now: Ts,
) -> Result<Vec<ClaimedRun>> {
    if claim.limit <= 0 {
        return Ok(Vec::new());
    }
    let rows = d.runs_claim(claim, now).await?;
    let awaited: Vec<i64> = rows
        .iter()
        .filter(|r| r.dependents)
        .map(|r| r.task_id)
        .collect();
    if !awaited.is_empty() {
        // After the claim's own commit: the runs are this replica's now
        // whatever happens here, and a cause that stays one step behind
        // must not stop them from executing.
        if let Err(e) = dependents_told(d, &awaited, now).await {
            tracing::warn!(error = %e, "could not update the causes of tasks waiting for claimed runs");
        }
    }
    let mut claimed = rows
        .into_iter()
        .map(ClaimRow::into_claimed)
        .collect::<Result<Vec<_>>>()?;
    claimed.sort_by_key(|c| c.id);
    Ok(claimed)
}

/// Claimed tasks that others wait for: their causes say RUNNING.
async fn dependents_told<D: Dialect>(d: &D, tasks: &[i64], now: Ts) -> Result<()> {
    let mut tx = d.begin().await?;
    dependencies::changed::<D>(&mut tx, tasks, now).await?;
    D::commit(tx).await
}

/// Extends the heartbeat deadline of the replica's runs, each by its own
/// heartbeat timeout (fenced).
pub async fn run_heartbeat_many<D: Dialect>(
    d: &D,
    replica_id: &str,
    beats: &[(i64, Duration)],
    now: Ts,
) -> Result<Beaten> {
    if beats.is_empty() {
        return Ok(Beaten::default());
    }
    d.runs_heartbeat(replica_id, beats, now).await
}
