//! One promotion round (docs/design.md, "Gates"): read every PENDING run
//! and what holds its gates, decide ([`domain::gates::evaluate`]), write the
//! promotions, unpins and waiting causes, all in one transaction that one
//! replica at a time may run.

use std::collections::HashSet;
use std::time::Instant;

use crate::store::engine::Dialect;
use crate::store::engine::gates;
use crate::store::engine::gates::dependencies;
use crate::store::engine::reads::rows::ClaimRow;
use crate::store::signals::Signal;
use crate::store::{Claim, PromoteReport, Result, RoundClaims, StoreError};
use domain::gates::{Decisions, NodeLabels, PendingRun};
use domain::time::Ts;

pub async fn run_promote_round<D: Dialect>(
    d: &D,
    nodes: &NodeLabels,
    claim: Option<&dyn RoundClaims>,
    now: Ts,
) -> Result<PromoteReport> {
    // One promoter at a time across replicas: a round that finds the
    // lock taken reads no runs and ends here, saying so: the holder may
    // be a submit or a brake, which runs no round after it, so the
    // promoter tries again shortly (`loops::promoter`).
    let mut tx = d.round_begin().await?;
    let Some((mut pending, context)) = D::round_reads(&mut tx).await? else {
        D::commit(tx).await?;
        return Ok(PromoteReport {
            lock_busy: true,
            ..PromoteReport::default()
        });
    };
    if pending.is_empty() {
        // Ended here, not dropped: a dropped transaction's ROLLBACK waits
        // for its connection's return to the pool, and until then the
        // round's lock stays taken, so a round begun meanwhile on another
        // connection (the next submit's) would read nothing and leave its
        // runs to the next wake-up.
        D::commit(tx).await?;
        return Ok(PromoteReport::default());
    }
    // First come, first served: `evaluate` takes runs oldest first.
    pending.sort_unstable_by_key(|r| r.id);
    // Brakes change only under this round's lock (`engine::gates::brakes`), so
    // reading them apart from the runs cannot see a half-made change.
    // Holders read after the runs can only be fewer (runs that ended in
    // between), never more: only a round adds them.
    let (brakes, targets) =
        domain::gates::Brakes::from_context(context).map_err(StoreError::Corrupt)?;
    brakes.apply(&mut pending);
    let needed = domain::gates::Summaries::needed_by(&pending);
    let mut holders = domain::gates::Holders {
        targets,
        ..Default::default()
    };
    if needed.plans {
        holders.plans = D::fetch_all(&mut tx, gates::PLAN_HOLDS.into(), &[]).await?;
    }
    if needed.versions {
        holders.versions = D::fetch_all(&mut tx, gates::VERSION_HOLDS.into(), &[]).await?;
        holders.halts = D::fetch_all(&mut tx, gates::HALTS.into(), &[]).await?;
    }
    let mut decided = domain::gates::evaluate(&pending, &holders, nodes, now);
    let claim = claim
        .filter(|_| !decided.promote.is_empty())
        .and_then(|c| c.claim());
    let to_claim = claim
        .as_ref()
        .map_or_else(Vec::new, |c| claimable(&pending, &mut decided, c));
    let left_available = D::round_write(&mut tx, &decided, now).await?;
    let mut claimed_at = None;
    let mut claimed = Vec::new();
    if let Some(c) = claim.as_ref().filter(|_| !to_claim.is_empty()) {
        // Stamped here, the round's lock held: these runs are this
        // replica's from the statement on, as a claimer's are once it
        // holds the claim lock. Never before the promotion's own stamp.
        let started = Ts::now().max(now);
        claimed_at = Some(Instant::now());
        claimed = D::round_claim(&mut tx, &to_claim, c, now, started).await?;
    }
    decided.promote.extend(&to_claim);
    let awaited = promoted_awaited(&pending, &decided.promote);
    if !awaited.is_empty() {
        dependencies::changed::<D>(&mut tx, &awaited, now).await?;
    }
    // `round_write` announced the promotions to the other replicas.
    D::commit(tx).await?;
    if left_available > 0 {
        d.signals().raise(Signal::Available);
    }
    if !claimed.is_empty() {
        // No loop waits on a claim, but pages show it.
        d.signals().touch();
    }
    let promoted = left_available + claimed.len();
    let mut claimed = claimed
        .into_iter()
        .map(ClaimRow::into_claimed)
        .collect::<Result<Vec<_>>>()?;
    claimed.sort_by_key(|c| c.id);
    Ok(PromoteReport {
        promoted,
        waiting: pending.iter().filter(|r| !r.held).count() - promoted,
        claimed,
        claimed_at,
        lock_busy: false,
    })
}

/// Takes out of `decided.promote` the runs the round claims for
/// `claim.replica_id`: oldest first, up to its limit, those it may
/// execute (no node, a node it carries, or unpinned by this round).
fn claimable(pending: &[PendingRun], decided: &mut Decisions, claim: &Claim<'_>) -> Vec<i64> {
    let limit = usize::try_from(claim.limit).unwrap_or(0);
    if limit == 0 || decided.promote.is_empty() {
        return Vec::new();
    }
    let unpinned: HashSet<i64> = decided.unpin.iter().map(|(id, _)| *id).collect();
    // `pending` is sorted by id.
    let eligible = |id: &i64| {
        pending
            .binary_search_by_key(id, |r| r.id)
            .ok()
            .is_some_and(|i| match &pending[i].node {
                None => true,
                Some(node) => claim.labels.contains(node) || unpinned.contains(id),
            })
    };
    let mut taken = Vec::new();
    decided.promote.retain(|id| {
        if taken.len() < limit && eligible(id) {
            taken.push(*id);
            false
        } else {
            true
        }
    });
    taken
}

/// Tasks of promoted runs that other tasks wait for (their causes name
/// the new status).
fn promoted_awaited(pending: &[domain::gates::PendingRun], promoted: &[i64]) -> Vec<i64> {
    if promoted.is_empty() || !pending.iter().any(|r| r.dependents) {
        return Vec::new();
    }
    let promoted: std::collections::HashSet<i64> = promoted.iter().copied().collect();
    pending
        .iter()
        .filter(|r| r.dependents && promoted.contains(&r.id))
        .map(|r| r.task_id)
        .collect()
}
