//! The leader lease (docs/design.md, "Liveness"): one replica at a time
//! runs the singleton loops (promoter, sweeper, pruning).
//!
//! The leader renews every third of the lease. If renewals fail (database
//! unreachable, slow), it steps down once two thirds of the lease have gone
//! by since the last renewal it sent, so it stops leading before anyone else
//! may start. A follower retries when the current lease expires, so it
//! takes over within one lease period of the leader's death. Expiry is
//! judged on the database's clock (docs/design.md, "One clock"), so a
//! replica whose host clock is off can neither take the lease early nor
//! write one that outlives it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::time::{Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::loops::Probe;
use crate::store::{LEADER_LEASE, Store};
use domain::time::Ts;

/// Whether this replica leads now; cheap to clone and to ask.
#[derive(Clone)]
pub struct Leadership {
    leading: watch::Receiver<bool>,
}

impl Leadership {
    pub fn is_leader(&self) -> bool {
        *self.leading.borrow()
    }

    /// Returns once this replica leads (at once if it does now).
    pub async fn until_leading(&mut self) {
        // An error means the lease loop ended (shutdown): wait forever and
        // let the caller's shutdown branch win.
        if self.leading.wait_for(|leading| *leading).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Returns once this replica no longer leads (at once if it does not,
    /// or if the lease loop ended).
    pub async fn until_deposed(&mut self) {
        // Err: the lease loop ended, so this replica leads no more either.
        let _ = self.leading.wait_for(|leading| !*leading).await;
    }

    /// The rhythm of a loop only the leader runs (sweeper, schedule
    /// ticker, pruner): returns `true` once this replica leads and `tick`
    /// says a round is due, `false` at shutdown. While it follows, `probe`
    /// hears that the loop is idle, so `/readyz` does not count it stalled.
    pub async fn next_round(
        &mut self,
        tick: &mut Interval,
        probe: &Probe,
        shutdown: &CancellationToken,
    ) -> bool {
        loop {
            if !self.is_leader() {
                probe.idle();
            }
            tokio::select! {
                _ = self.until_leading() => {}
                _ = shutdown.cancelled() => return false,
            }
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.cancelled() => return false,
            }
            if self.is_leader() {
                return true;
            }
        }
    }
}

/// A round every `every`, late rounds delayed rather than bunched.
pub fn round_interval(every: Duration) -> Interval {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tick
}

pub struct LeaderLease {
    store: Arc<dyn Store>,
    replica_id: String,
    ttl: Duration,
    leading: watch::Sender<bool>,
    probe: Probe,
}

impl LeaderLease {
    pub fn new(store: Arc<dyn Store>, replica_id: String, ttl: Duration) -> (Self, Leadership) {
        let (leading, rx) = watch::channel(false);
        let lease = LeaderLease {
            store,
            replica_id,
            ttl,
            leading,
            probe: Probe::detached(),
        };
        (lease, Leadership { leading: rx })
    }

    /// Reports each renewal to `probe` (for `/readyz`).
    pub fn reporting_to(mut self, probe: Probe) -> Self {
        self.probe = probe;
        self
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let renew_every = self.ttl / 3;
        // When the leader must have stopped leading unless a renewal
        // succeeded: two thirds into the lease it last renewed, counted
        // from when that renewal was sent (the lease may have been stamped
        // that early).
        let mut step_down_at: Option<Instant> = None;
        loop {
            let sent = Instant::now();
            if step_down_at.is_some_and(|at| sent >= at) {
                step_down_at = None;
                self.set_leading(false);
            }
            // A renewal that hangs must not carry the leader past its
            // step-down time.
            let budget = step_down_at.map_or(renew_every, |at| (at - sent).min(renew_every));
            let attempt = tokio::time::timeout(
                budget,
                self.store
                    .lease_acquire(LEADER_LEASE, &self.replica_id, self.ttl, Ts::now()),
            )
            .await;
            let wait = match attempt {
                Ok(Ok(lease)) if lease.holder == self.replica_id => {
                    self.probe.round_done();
                    step_down_at = Some(sent + self.ttl * 2 / 3);
                    self.set_leading(true);
                    renew_every
                }
                Ok(Ok(lease)) => {
                    self.probe.round_done();
                    step_down_at = None;
                    self.set_leading(false);
                    // Try again as soon as the holder's lease runs out.
                    let left = (lease.expires_at.0 - Ts::now().0)
                        .to_std()
                        .unwrap_or_default();
                    left.min(renew_every) + Duration::from_millis(20)
                }
                failed => {
                    let error = match failed {
                        Ok(Err(e)) => e.to_string(),
                        _ => format!("no answer within {} ms", budget.as_millis()),
                    };
                    tracing::warn!(%error, "leader lease renewal failed; will retry");
                    self.probe.round_failed(&anyhow::anyhow!("{error}"));
                    let retry = renew_every / 4;
                    step_down_at.map_or(retry, |at| {
                        retry.min(at.saturating_duration_since(Instant::now()))
                    })
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.cancelled() => break,
            }
        }
        // Hand leadership over at once rather than after the lease runs out.
        if self.leading.send_replace(false) {
            tracing::info!(replica = %self.replica_id, "shutting down: giving up the leader lease");
            let release = self.store.lease_release(LEADER_LEASE, &self.replica_id);
            match tokio::time::timeout(super::LAST_WRITE, release).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "could not release the leader lease; it expires by itself")
                }
                Err(_) => tracing::warn!(
                    "the database did not take the lease's release in time; it expires by itself"
                ),
            }
        }
    }

    fn set_leading(&self, leading: bool) {
        let changed = self.leading.send_if_modified(|now| {
            let changed = *now != leading;
            *now = leading;
            changed
        });
        if changed {
            if leading {
                tracing::info!(replica = %self.replica_id, "this replica is now the leader");
            } else {
                tracing::warn!(replica = %self.replica_id, "this replica is no longer the leader");
            }
        }
    }
}
