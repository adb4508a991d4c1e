//! Claims AVAILABLE runs up to the replica's free worker slots (SPEC §4).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{SchedulerConfig, Worker};
use crate::store::{Claim, Store, Ts};

pub struct Claimer {
    store: Arc<dyn Store>,
    worker: Arc<Worker>,
    labels: Vec<String>,
    poll_interval: Duration,
    heartbeat_timeout: Duration,
}

impl Claimer {
    pub fn new(
        store: Arc<dyn Store>,
        worker: Arc<Worker>,
        labels: Vec<String>,
        config: &SchedulerConfig,
    ) -> Self {
        Claimer {
            store,
            worker,
            labels,
            poll_interval: config.poll_interval,
            heartbeat_timeout: config.stale_after,
        }
    }

    /// Claims what fits in the free slots and starts executing it. Returns
    /// how many runs were claimed.
    pub async fn run_once(&self) -> anyhow::Result<usize> {
        let free = self.worker.free_slots();
        if free == 0 {
            return Ok(0);
        }
        let claim = Claim {
            replica_id: self.worker.replica_id(),
            labels: &self.labels,
            limit: free as i64,
            heartbeat_timeout: self.heartbeat_timeout,
        };
        let claimed = self.store.run_claim_many(&claim, Ts::now()).await?;
        let n = claimed.len();
        if n > 0 {
            tracing::debug!(claimed = n, free, "claimed runs");
        }
        self.worker.spawn_all(claimed);
        Ok(n)
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let signals = self.store.signals().clone();
        loop {
            let filled_every_slot = match self.run_once().await {
                Ok(n) => n > 0 && self.worker.free_slots() == 0,
                Err(e) => {
                    tracing::warn!(error = %e, "claim failed; will retry");
                    false
                }
            };
            if filled_every_slot {
                // More may be waiting: claim again as soon as a slot frees.
                tokio::select! {
                    _ = self.worker.slot_freed.notified() => continue,
                    _ = shutdown.cancelled() => return,
                }
            }
            tokio::select! {
                _ = signals.available.notified() => {}
                _ = self.worker.slot_freed.notified() => {}
                _ = tokio::time::sleep(self.poll_interval) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }
}
