//! Promotes PENDING runs whose gates all pass (docs/design.md, "Gates").
//!
//! Only the leader runs rounds. A round also claims, for this replica's
//! free worker slots, the runs it promotes that this replica may
//! execute: they start without the round's commit having to wake a
//! claimer that then asks the database for them (three round trips and
//! two wake-ups between a submit and its run's start), and their rows
//! are written once instead of twice. The rest wait AVAILABLE for every
//! replica's claimer, as before. The store still lets one round run at a
//! time (advisory lock on PostgreSQL, the write lock on SQLite), which keeps
//! promotion safe during a change of leader, when an old leader's last round
//! may overlap the new leader's first.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::OwnedMutexGuard;
use tokio_util::sync::CancellationToken;

use super::health::Probe;
use super::{Claimant, SchedulerConfig, Worker};
use crate::loops::Leadership;
use crate::store::{Claim, PromoteReport, RoundClaims, Store};
use domain::gates::NodeLabels;
use domain::time::Ts;

/// The replica a round claims for.
struct ClaimsFor {
    worker: Arc<Worker>,
    labels: Vec<String>,
    heartbeat_timeout: Duration,
}

/// One round's claim for [`ClaimsFor`]'s replica: granted (by the store,
/// once the round has runs to promote) only to a replica that can prove
/// it is alive, in its claim turn, for the slots free then. The turn is
/// kept until the claimed runs are spawned.
struct RoundTurn<'a> {
    claims: &'a ClaimsFor,
    turn: Mutex<Option<OwnedMutexGuard<()>>>,
}

impl RoundClaims for RoundTurn<'_> {
    fn claim(&self) -> Option<Claim<'_>> {
        let worker = &self.claims.worker;
        if !worker.ownership().provable() {
            return None;
        }
        let turn = worker.try_claim_turn()?;
        let free = worker.free_slots();
        if free == 0 {
            return None;
        }
        *self.turn.lock().expect("poisoned") = Some(turn);
        Some(Claim {
            replica_id: worker.replica_id(),
            labels: &self.claims.labels,
            limit: free as i64,
            heartbeat_timeout: self.claims.heartbeat_timeout,
        })
    }
}

/// How soon a round that found the promotion lock taken tries again:
/// its holder's transaction (a round, a submit's admission, a brake)
/// lasts milliseconds.
const LOCK_BUSY_RETRY: Duration = Duration::from_millis(10);

pub struct Promoter {
    store: Arc<dyn Store>,
    leadership: Leadership,
    poll_interval: Duration,
    stale_after: Duration,
    /// Node labels of live replicas, refreshed at most every heartbeat.
    nodes: Option<(Instant, NodeLabels)>,
    nodes_max_age: Duration,
    probe: Probe,
    claims: Option<ClaimsFor>,
    heartbeat_timeout: Duration,
}

impl Promoter {
    pub fn new(store: Arc<dyn Store>, leadership: Leadership, config: &SchedulerConfig) -> Self {
        Promoter {
            store,
            leadership,
            poll_interval: config.poll_interval,
            stale_after: config.stale_after,
            nodes: None,
            nodes_max_age: config.heartbeat_interval,
            probe: Probe::detached(),
            claims: None,
            heartbeat_timeout: config.run_heartbeat_timeout(),
        }
    }

    /// Lets each round claim for `worker`'s replica (node `labels`).
    pub fn claiming_for(mut self, worker: Arc<Worker>, labels: Vec<String>) -> Self {
        self.claims = Some(ClaimsFor {
            worker,
            labels,
            heartbeat_timeout: self.heartbeat_timeout,
        });
        self
    }

    /// Reports each round to `probe` (for `/readyz`).
    pub fn reporting_to(mut self, probe: Probe) -> Self {
        self.probe = probe;
        self
    }

    /// One round; the runs it claimed are handed to the worker, so the
    /// report's `claimed` comes back empty.
    pub async fn run_once(&mut self) -> anyhow::Result<PromoteReport> {
        let now = Ts::now();
        let fresh = matches!(&self.nodes, Some((at, _)) if at.elapsed() < self.nodes_max_age);
        if !fresh {
            let labels =
                crate::store::node_labels(self.store.as_ref(), self.stale_after, now).await?;
            self.nodes = Some((Instant::now(), labels));
        }
        let nodes = &self.nodes.as_ref().expect("just set").1;
        let turn = self.claims.as_ref().map(|claims| RoundTurn {
            claims,
            turn: Mutex::new(None),
        });
        let mut report = self
            .store
            .run_promote_round(nodes, turn.as_ref().map(|t| t as &dyn RoundClaims), now)
            .await?;
        if report.promoted > 0 {
            tracing::debug!(
                promoted = report.promoted,
                claimed = report.claimed.len(),
                waiting = report.waiting,
                "promoted runs"
            );
        }
        if let (Some(turn), Some(at)) = (turn, report.claimed_at) {
            let claimed = std::mem::take(&mut report.claimed);
            turn.claims.worker.spawn_all(claimed, at, Claimant::Round);
        }
        Ok(report)
    }

    pub async fn run(mut self, shutdown: CancellationToken) {
        let signals = self.store.signals().clone();
        loop {
            if !self.leadership.is_leader() {
                self.probe.idle();
                let mut leadership = self.leadership.clone();
                tokio::select! {
                    _ = leadership.until_leading() => {}
                    _ = shutdown.cancelled() => return,
                }
            }
            if crate::faults::panic_in_promoter() {
                panic!("BATON_FAULT=panic-in-promoter");
            }
            let outcome = self.run_once().await;
            self.probe.ended("promotion round", &outcome);
            // A round that found the lock taken owes the wake-up it
            // answered a round: its holder, a submit admitting runs or a
            // brake, runs none after it.
            let wait = match &outcome {
                Ok(report) if report.lock_busy => LOCK_BUSY_RETRY,
                _ => self.poll_interval,
            };
            tokio::select! {
                _ = signals.changed.notified() => {}
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }
}
