//! Pins that outlive their node (docs/design.md, "Invariants", invariant 7:
//! nothing waits forever on a dead node). A promotion round drops the pin
//! of a PENDING run whose node label no live replica carried for
//! `reassign_after`; this does the same for AVAILABLE runs, which a round
//! never reads: a run promoted while its node was alive, whose replica then
//! died or shut down and handed it back, would otherwise wait for a claimer
//! that never comes, holding its target and a plan slot.

use std::time::Duration;

use crate::store::engine::Dialect;
use crate::store::engine::gates;
use crate::store::signals::Signal;
use crate::store::{Result, SCHEDULER, Store};
use domain::gates::PinnedRun;
use domain::time::Ts;

/// Drops expired pins of AVAILABLE runs; the ids unpinned. Each keeps its
/// status, attempt and target, gains an event naming the lost pin, and
/// any replica may claim it.
pub async fn run_unpin_stranded<D: Dialect + Store>(
    d: &D,
    stale_after: Duration,
    now: Ts,
) -> Result<Vec<i64>> {
    let pinned: Vec<PinnedRun> = d.read(gates::AVAILABLE_PINNED.into(), &[]).await?;
    if pinned.is_empty() {
        return Ok(Vec::new());
    }
    let nodes = gates::node_labels(d, stale_after, now).await?;
    let expired = domain::gates::stranded(&pinned, &nodes, now);
    if expired.is_empty() {
        return Ok(Vec::new());
    }
    let mut tx = d.begin().await?;
    let mut unpinned = Vec::with_capacity(expired.len());
    for (id, detail) in &expired {
        // Only while it is still AVAILABLE and pinned: a claim that came
        // first (its node's replica is back) wins, and nothing is written.
        let changed = D::execute(
            &mut tx,
            "UPDATE task_run SET node = NULL
             WHERE id = $1 AND status = 'AVAILABLE' AND node IS NOT NULL"
                .into(),
            &[(*id).into()],
        )
        .await?;
        if changed == 0 {
            continue;
        }
        D::execute(
            &mut tx,
            "UPDATE available_run SET node = NULL WHERE run_id = $1".into(),
            &[(*id).into()],
        )
        .await?;
        D::execute(
            &mut tx,
            "INSERT INTO run_event (run_id, from_status, to_status, actor, at, detail)
             VALUES ($1, 'AVAILABLE', 'AVAILABLE', $2, $3, $4)"
                .into(),
            &[
                (*id).into(),
                SCHEDULER.into(),
                now.into(),
                detail.as_str().into(),
            ],
        )
        .await?;
        unpinned.push(*id);
    }
    if !unpinned.is_empty() {
        D::announce(&mut tx, Signal::Available).await?;
    }
    D::commit(tx).await?;
    if !unpinned.is_empty() {
        Dialect::signals(d).raise(Signal::Available);
    }
    Ok(unpinned)
}
