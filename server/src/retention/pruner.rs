//! The leader's pruning loop: every minute, the finished plans older
//! than the retention window go.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{PAUSE, PRUNE_EVERY, prune};
use crate::liveness::Leadership;
use crate::store::{Store, Ts};

/// The leader's pruning loop.
pub struct Pruner {
    store: Arc<dyn Store>,
    leadership: Leadership,
    retain: Duration,
    every: Duration,
}

impl Pruner {
    pub fn new(store: Arc<dyn Store>, leadership: Leadership, retain: Duration) -> Self {
        Pruner {
            store,
            leadership,
            retain,
            every: PRUNE_EVERY,
        }
    }

    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = self.leadership.until_leading() => {}
                _ = shutdown.cancelled() => return,
            }
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.cancelled() => return,
            }
            if !self.leadership.is_leader() {
                continue;
            }
            // Stops between batches when leadership or the process ends,
            // so a deposed leader does not keep deleting beside the new one
            // (which would be harmless, only wasted: each batch re-checks).
            let stop = shutdown.child_token();
            let lost = {
                let mut leadership = self.leadership.clone();
                let stop = stop.clone();
                tokio::spawn(async move {
                    leadership.until_deposed().await;
                    stop.cancel();
                })
            };
            let cutoff = Ts::now().minus(self.retain);
            match prune(&*self.store, cutoff, PAUSE, &stop, |_| {}).await {
                Ok(r) if r.plans > 0 => tracing::info!(
                    plans = r.plans,
                    runs = r.runs,
                    events = r.events,
                    logs = r.logs,
                    "pruned finished plans older than {}",
                    humantime::format_duration(self.retain)
                ),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "pruning finished plans failed; will retry"),
            }
            lost.abort();
        }
    }
}
