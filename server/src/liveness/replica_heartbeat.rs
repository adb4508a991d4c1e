//! Upserts this replica's row every heartbeat interval, so others (and the
//! node gate) know it is alive; deletes it on shutdown.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::scheduler::Probe;
use crate::store::{ReplicaInfo, Store, Ts};

pub struct ReplicaHeartbeat {
    store: Arc<dyn Store>,
    info: ReplicaInfo,
    interval: Duration,
    probe: Probe,
}

impl ReplicaHeartbeat {
    pub fn new(store: Arc<dyn Store>, info: ReplicaInfo, interval: Duration) -> Self {
        ReplicaHeartbeat {
            store,
            info,
            interval,
            probe: Probe::detached(),
        }
    }

    /// Reports each beat to `probe` (for `/readyz`).
    pub fn reporting_to(mut self, probe: Probe) -> Self {
        self.probe = probe;
        self
    }

    pub async fn run_once(&self) -> anyhow::Result<()> {
        self.store.replica_upsert(&self.info, Ts::now()).await?;
        Ok(())
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    match self.run_once().await {
                        Ok(()) => self.probe.round_done(),
                        Err(e) => {
                            tracing::warn!(error = %e, "replica heartbeat failed; will retry");
                            self.probe.round_failed(&e);
                        }
                    }
                }
                _ = shutdown.cancelled() => break,
            }
        }
        if let Err(e) = self.store.replica_delete(&self.info.replica_id).await {
            tracing::warn!(error = %e, "could not remove this replica's heartbeat row");
        }
    }
}
