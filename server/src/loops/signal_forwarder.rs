//! Keeps the PostgreSQL LISTEN connection alive, reconnecting after
//! failures, so other replicas' commits wake this replica's loops.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::store::Store;

pub struct SignalForwarder {
    store: Arc<dyn Store>,
    retry_after: Duration,
}

impl SignalForwarder {
    pub fn new(store: Arc<dyn Store>, retry_after: Duration) -> Self {
        SignalForwarder { store, retry_after }
    }

    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                result = self.store.signals_forward() => {
                    if let Err(e) = result {
                        tracing::warn!(error = %e, "lost the notification connection; polling until it is back");
                    }
                }
                _ = shutdown.cancelled() => return,
            }
            // Until it listens again the loops poll; once it does,
            // `signals_forward` wakes each of them to find what was
            // announced meanwhile.
            tokio::select! {
                _ = tokio::time::sleep(self.retry_after) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }
}
