//! Claims AVAILABLE runs up to the replica's free worker slots
//! (docs/design.md, "Claim and execute").

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::health::Probe;
use super::{Claimant, RunLedger, SchedulerConfig, Worker};
use crate::store::Claim;
use domain::time::Ts;

pub struct Claimer {
    store: Arc<dyn RunLedger>,
    worker: Arc<Worker>,
    labels: Vec<String>,
    poll_interval: Duration,
    heartbeat_timeout: Duration,
    probe: Probe,
}

impl Claimer {
    pub fn new(
        store: Arc<dyn RunLedger>,
        worker: Arc<Worker>,
        labels: Vec<String>,
        config: &SchedulerConfig,
    ) -> Self {
        Claimer {
            store,
            worker,
            labels,
            poll_interval: config.poll_interval,
            heartbeat_timeout: config.run_heartbeat_timeout(),
            probe: Probe::detached(),
        }
    }

    /// Reports each round to `probe` (for `/readyz`).
    pub fn reporting_to(mut self, probe: Probe) -> Self {
        self.probe = probe;
        self
    }

    /// Claims what fits in the free slots and starts executing it. Returns
    /// how many runs were claimed.
    pub async fn run_once(&self) -> anyhow::Result<usize> {
        Ok(self.claim().await?.0)
    }

    /// [`Claimer::run_once`], and how many slots it asked to fill.
    async fn claim(&self) -> anyhow::Result<(usize, usize)> {
        // A replica that cannot prove it is alive would be swept before
        // long: it must not take work it would have to abandon.
        if !self.worker.ownership().provable() {
            return Ok((0, 0));
        }
        // Held until the claimed runs are spawned: the leader's promotion
        // round claims for this replica too.
        let _turn = self.worker.claim_turn().await;
        let free = self.worker.settled_free_slots().await;
        if free == 0 {
            return Ok((0, 0));
        }
        let claim = Claim {
            replica_id: self.worker.replica_id(),
            labels: &self.labels,
            limit: free as i64,
            heartbeat_timeout: self.heartbeat_timeout,
        };
        // Before the statement: the database stamps the runs' heartbeat
        // deadlines from the `now` sent with it plus its wait for the
        // claim lock, never earlier than this.
        let sent = std::time::Instant::now();
        let claimed = self.store.run_claim_many(&claim, Ts::now()).await?;
        let n = claimed.len();
        if n > 0 {
            tracing::debug!(
                claimed = n,
                free,
                took_us = sent.elapsed().as_micros() as u64,
                "claimed runs"
            );
        }
        let proven_from = self.store.claim_proven_from(sent);
        self.worker
            .spawn_all(claimed, proven_from, Claimant::Claimer);
        Ok((n, free))
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let signals = self.store.signals().clone();
        // Whether runs may be waiting. A claim that leaves slots free saw
        // everything there was; after it only a promotion (its signal) or
        // the poll can make more AVAILABLE, so a slot freeing up alone is
        // no reason to ask the database again.
        let mut maybe_more = true;
        // A steady tick: frequent slot wake-ups must not keep postponing it.
        let mut poll = tokio::time::interval(self.poll_interval);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if maybe_more && self.worker.free_slots() > 0 {
                maybe_more = match self.claim().await {
                    Ok((n, asked)) => {
                        self.probe.round_done();
                        // Asked for nothing (a round filled the slots
                        // meanwhile): nothing was looked at.
                        asked == 0 || n >= asked
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "claim failed; will retry");
                        self.probe.round_failed(&e);
                        false
                    }
                };
            } else {
                // Full, or nothing new to ask for: a round with nothing to
                // do, not a stall.
                self.probe.round_done();
            }
            tokio::select! {
                _ = signals.available.notified() => maybe_more = true,
                _ = self.worker.slot_freed.notified() => {}
                _ = poll.tick() => maybe_more = true,
                _ = shutdown.cancelled() => return,
            }
        }
    }
}
