//! Every replica's repair of the queue of AVAILABLE runs while a replica
//! of an older build may write to the database
//! (`store::engine::queue_repair`). Every replica's, not only the
//! leader's: an older leader promotes runs without queueing them, and
//! no claimer of this build would see them until it stopped.
//!
//! It looks once per interval; while older builds may write, also
//! whenever runs became AVAILABLE (an older promoter's NOTIFY says so),
//! so that this build's claimers see those runs as soon as the older
//! claimers do, rather than an interval later, when they have taken
//! them all.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::store::Store;
use domain::time::Ts;

pub struct QueueRepairer {
    store: Arc<dyn Store>,
    interval: Duration,
}

impl QueueRepairer {
    pub fn new(store: Arc<dyn Store>, interval: Duration) -> Self {
        QueueRepairer { store, interval }
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let mut tick = super::round_interval(self.interval);
        let mut available = self.store.signals().availabilities();
        // Whether the last look found that an older build may write.
        let mut mixed = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                changed = available.changed(), if mixed => {
                    if changed.is_err() {
                        mixed = false;
                        continue;
                    }
                }
                _ = shutdown.cancelled() => return,
            }
            match self.store.run_queue_repair(Ts::now()).await {
                Ok(None) => mixed = false,
                Ok(Some(0)) => mixed = true,
                Ok(Some(repaired)) => {
                    mixed = true;
                    tracing::info!(
                        repaired,
                        "a replica of an older build moved runs into or out of AVAILABLE \
                         without their queue rows; repaired"
                    );
                }
                Err(e) => tracing::warn!(error = %e, "cannot repair the queue of AVAILABLE runs"),
            }
        }
    }
}
