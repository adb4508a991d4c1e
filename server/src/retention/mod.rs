//! Retention: the leader deletes finished plans older than
//! `--retain-finished` (default 30 days), and audit entries as old, and
//! `baton prune` deletes the plans once.
//!
//! The rules of what may go live in the store (`store::engine::retention`);
//! this is the pacing, the leader's loop (`pruner`) and `baton prune`
//! (`command`). Plans are deleted a batch (about 2,000 runs) per
//! transaction with a pause between batches, so the claims and finishes
//! of live runs get the database in between; on SQLite, whose one writer
//! every batch takes, that pause is what keeps claim latency flat.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::store::{PRUNE_BATCH_RUNS as BATCH_RUNS, PruneCursor, PruneReport, Store};
use domain::time::Ts;

/// How long finished plans are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retain {
    Forever,
    For(Duration),
}

/// The default: 30 days.
pub const DEFAULT_RETAIN: &str = "30d";
/// Shorter windows are refused: an idempotency key is honoured for a
/// day, and pruning within minutes of a plan's end is a typo, not a
/// policy.
pub const MIN_RETAIN: Duration = Duration::from_secs(60);
/// How often the leader looks for plans to prune.
pub const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// Plans looked at per search.
const SCAN: i64 = 200;
/// The pause after each deleting transaction.
pub const PAUSE: Duration = Duration::from_millis(50);

impl FromStr for Retain {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("forever") {
            return Ok(Retain::Forever);
        }
        let d = humantime::parse_duration(s)
            .map_err(|e| format!("{s:?} is neither a duration (30d, 12h) nor `forever`: {e}"))?;
        if d < MIN_RETAIN {
            return Err(format!(
                "{s:?} is shorter than the shortest retention, {}",
                humantime::format_duration(MIN_RETAIN)
            ));
        }
        // Far beyond any real window, and keeps `now - d` representable.
        if d > Duration::from_secs(100 * 365 * 86_400) {
            return Err(format!("{s:?} is longer than 100 years; say `forever`"));
        }
        Ok(Retain::For(d))
    }
}

impl fmt::Display for Retain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Retain::Forever => f.write_str("forever"),
            Retain::For(d) => write!(f, "{}", humantime::format_duration(*d)),
        }
    }
}

/// Deletes every plan that may be pruned with `cutoff`, a batch per
/// transaction, pausing `pause` after each; stops early when `stop`
/// fires. `on_batch` hears the running totals (for a progress line).
pub async fn prune(
    store: &dyn Store,
    cutoff: Ts,
    pause: Duration,
    stop: &CancellationToken,
    mut on_batch: impl FnMut(&PruneReport),
) -> anyhow::Result<PruneReport> {
    let mut done = PruneReport::default();
    let mut from: Option<PruneCursor> = None;
    loop {
        let scan = store.plan_prune_scan(cutoff, from, SCAN).await?;
        // Whole plans per transaction, about BATCH_RUNS runs each.
        let mut batch: Vec<i64> = Vec::new();
        let mut runs = 0;
        let mut plans = scan.prunable.iter().peekable();
        while let Some(plan) = plans.next() {
            batch.push(plan.plan_id);
            runs += plan.runs.max(1);
            let full = plans
                .peek()
                .is_none_or(|next| runs + next.runs.max(1) > BATCH_RUNS);
            if full {
                if stop.is_cancelled() {
                    return Ok(done);
                }
                done.add(store.plan_prune(&batch, cutoff).await?);
                on_batch(&done);
                batch.clear();
                runs = 0;
                tokio::time::sleep(pause).await;
            }
        }
        match scan.next {
            Some(next) if !stop.is_cancelled() => from = Some(next),
            _ => return Ok(done),
        }
    }
}

/// Audit entries deleted per transaction.
pub const AUDIT_BATCH: i64 = 1000;

/// Deletes the audit entries older than `cutoff`, [`AUDIT_BATCH`] per
/// transaction, pausing `pause` after each; stops early when `stop`
/// fires. Separate from the plans: an entry outlives the plan it names
/// until it is old itself (it is the record of who did what), and is
/// never deleted because its plan was.
pub async fn prune_audit(
    store: &dyn Store,
    cutoff: Ts,
    pause: Duration,
    stop: &CancellationToken,
) -> anyhow::Result<u64> {
    let mut done = 0;
    while !stop.is_cancelled() {
        let deleted = store.audit_prune(cutoff, AUDIT_BATCH).await?;
        done += deleted;
        if deleted < AUDIT_BATCH as u64 {
            break;
        }
        tokio::time::sleep(pause).await;
    }
    Ok(done)
}

/// What a dry run counts: the plans that may go now, and their latest
/// runs (earlier attempts of retried tasks come on top).
pub async fn prune_dry_run(store: &dyn Store, cutoff: Ts) -> anyhow::Result<(u64, u64)> {
    let (mut plans, mut runs) = (0, 0);
    let mut from = None;
    loop {
        let scan = store.plan_prune_scan(cutoff, from, SCAN).await?;
        plans += scan.prunable.len() as u64;
        runs += scan.prunable.iter().map(|p| p.runs as u64).sum::<u64>();
        match scan.next {
            Some(next) => from = Some(next),
            None => return Ok((plans, runs)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_reads_durations_and_forever() {
        assert_eq!(
            "30d".parse(),
            Ok(Retain::For(Duration::from_secs(30 * 86_400)))
        );
        assert_eq!(" Forever ".parse(), Ok(Retain::Forever));
        assert_eq!("90m".parse(), Ok(Retain::For(Duration::from_secs(90 * 60))));
        for bad in ["", "30", "-1d", "10s", "0", "never", "1000000y"] {
            let refused = bad.parse::<Retain>().unwrap_err();
            assert!(refused.contains(&format!("{bad:?}")), "{refused}");
        }
    }
}
