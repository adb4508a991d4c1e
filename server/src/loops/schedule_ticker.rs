//! Fires schedules (docs/design.md, "Schedules"): each round turns every
//! due tick into exactly one plan (`store::engine::schedules`).
//!
//! Only the leader runs rounds, every `poll_interval`. Exactly-once does
//! not rest on that: the store claims each tick in the transaction that
//! makes its plan, so an old leader's last round racing the new leader's
//! first makes each tick once. A leader that dies just before a tick is
//! replaced within `leader_lease`, and the next leader's first round
//! makes the tick, late but within the grace, so it is not "missed".

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::SchedulerConfig;
use super::health::Probe;
use crate::loops::{Leadership, round_interval};
use crate::store::{Store, TickReport};
use domain::time::Ts;

/// The least a tick may be late and still fire as on time; the grace is
/// longer when the leader lease is (see [`grace`]).
pub const MIN_GRACE: Duration = Duration::from_secs(60);

/// How late a tick may fire and still count as on time: a change of
/// leader (a lease) and a round of the new leader must fit in it.
pub fn grace(config: &SchedulerConfig) -> Duration {
    MIN_GRACE.max(config.leader_lease * 2 + config.poll_interval * 2)
}

pub struct Ticker {
    store: Arc<dyn Store>,
    leadership: Leadership,
    replica_id: String,
    poll_interval: Duration,
    grace: Duration,
    probe: Probe,
}

impl Ticker {
    pub fn new(
        store: Arc<dyn Store>,
        leadership: Leadership,
        replica_id: String,
        config: &SchedulerConfig,
    ) -> Self {
        Ticker {
            store,
            leadership,
            replica_id,
            poll_interval: config.poll_interval,
            grace: grace(config),
            probe: Probe::detached(),
        }
    }

    /// Reports each round to `probe` (for `/readyz`).
    pub fn reporting_to(mut self, probe: Probe) -> Self {
        self.probe = probe;
        self
    }

    pub async fn run_once(&self) -> anyhow::Result<TickReport> {
        let report = self
            .store
            .schedule_fire_due(&self.replica_id, self.grace, Ts::now())
            .await?;
        if report != TickReport::default() {
            tracing::info!(
                created = report.created,
                queued = report.queued,
                skipped = report.skipped,
                missed = report.missed,
                failed = report.failed,
                started = report.started,
                "schedules fired"
            );
        }
        if report.created + report.queued > 0 && crate::faults::exit_after_tick_commit() {
            crate::faults::die_now("a schedule's tick was committed");
        }
        Ok(report)
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let mut tick = round_interval(self.poll_interval);
        let mut leadership = self.leadership.clone();
        while leadership
            .next_round(&mut tick, &self.probe, &shutdown)
            .await
        {
            let outcome = self.run_once().await;
            self.probe.ended("schedule round", &outcome);
        }
    }
}
