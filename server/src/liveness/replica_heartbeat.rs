//! Upserts this replica's row every heartbeat interval, so others (and the
//! node gate) know it is alive; deletes it on shutdown.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::scheduler::{Ownership, Probe};
use crate::store::{ReplicaInfo, Store, Ts};

pub struct ReplicaHeartbeat {
    store: Arc<dyn Store>,
    info: ReplicaInfo,
    interval: Duration,
    probe: Probe,
    ownership: Option<Arc<Ownership>>,
}

impl ReplicaHeartbeat {
    pub fn new(store: Arc<dyn Store>, info: ReplicaInfo, interval: Duration) -> Self {
        ReplicaHeartbeat {
            store,
            info,
            interval,
            probe: Probe::detached(),
            ownership: None,
        }
    }

    /// Each recorded beat proves this replica still owns its runs.
    pub fn proving(mut self, ownership: Arc<Ownership>) -> Self {
        self.ownership = Some(ownership);
        self
    }

    /// Reports each beat to `probe` (for `/readyz`).
    pub fn reporting_to(mut self, probe: Probe) -> Self {
        self.probe = probe;
        self
    }

    pub async fn run_once(&self) -> anyhow::Result<()> {
        // Counted from before the write: the row says `Ts::now()` from here,
        // and others judge staleness from that stamp.
        let sent = std::time::Instant::now();
        self.store.replica_upsert(&self.info, Ts::now()).await?;
        if let Some(ownership) = &self.ownership {
            ownership.proven(sent);
        }
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
