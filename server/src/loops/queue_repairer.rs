//! Every replica's repair of the queue of AVAILABLE runs while a replica
//! of an older build may write to the database
//! (`store::engine::queue_repair`). Every replica's, not only the
//! leader's: an older leader promotes runs without queueing them, and
//! no newer claimer would see them until it stopped.

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
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.cancelled() => return,
            }
            match self.store.run_queue_repair(Ts::now()).await {
                Ok(0) => {}
                Ok(repaired) => tracing::info!(
                    repaired,
                    "a replica of an older build moved runs into or out of AVAILABLE \
                     without their queue rows; repaired"
                ),
                Err(e) => tracing::warn!(error = %e, "cannot repair the queue of AVAILABLE runs"),
            }
        }
    }
}
