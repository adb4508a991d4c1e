//! The leader's pruning loop: every minute, the finished plans older
//! than the retention window go, then the audit entries as old.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::loops::Probe;
use crate::loops::{Leadership, round_interval};
use crate::retention::{PAUSE, PRUNE_EVERY, prune, prune_audit};
use crate::store::Store;
use domain::time::Ts;

/// The most one round works: a backlog (a first start with years of
/// history, a window just shortened) is worked off over several rounds,
/// so each round ends in time for `/readyz` and a deposed leader stops
/// soon.
const ROUND_BUDGET: Duration = Duration::from_secs(30);

pub struct Pruner {
    store: Arc<dyn Store>,
    leadership: Leadership,
    retain: Duration,
    probe: Probe,
}

impl Pruner {
    pub fn new(store: Arc<dyn Store>, leadership: Leadership, retain: Duration) -> Self {
        Pruner {
            store,
            leadership,
            retain,
            probe: Probe::detached(),
        }
    }

    /// Reports each round to `probe` (for `/readyz`).
    pub fn reporting_to(mut self, probe: Probe) -> Self {
        self.probe = probe;
        self
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let mut tick = round_interval(PRUNE_EVERY);
        let mut leadership = self.leadership.clone();
        while leadership
            .next_round(&mut tick, &self.probe, &shutdown)
            .await
        {
            let outcome = self.round(&shutdown).await;
            self.probe.ended("pruning finished plans", &outcome);
        }
    }

    /// One round: prunes until done, the budget is spent, leadership is
    /// lost or the process stops, whichever comes first (always between
    /// batches: each is whole plans).
    async fn round(&self, shutdown: &CancellationToken) -> anyhow::Result<()> {
        let stop = shutdown.child_token();
        let watcher = {
            let mut leadership = self.leadership.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = leadership.until_deposed() => {}
                    _ = tokio::time::sleep(ROUND_BUDGET) => {}
                }
                stop.cancel();
            })
        };
        let cutoff = Ts::now().minus(self.retain);
        let pruned = prune(&*self.store, cutoff, PAUSE, &stop, |_| {}).await;
        let audit = match pruned {
            Ok(_) => prune_audit(&*self.store, cutoff, PAUSE, &stop).await,
            Err(_) => Ok(0),
        };
        watcher.abort();
        let r = pruned?;
        let audit = audit?;
        if audit > 0 {
            tracing::info!(
                entries = audit,
                "pruned audit entries older than {}",
                humantime::format_duration(self.retain)
            );
        }
        if r.plans > 0 {
            tracing::info!(
                plans = r.plans,
                runs = r.runs,
                events = r.events,
                logs = r.logs,
                more = stop.is_cancelled(),
                "pruned finished plans older than {}",
                humantime::format_duration(self.retain)
            );
        }
        Ok(())
    }
}
