//! Every loop a replica runs in-process, one file each: the scheduling
//! loops (docs/design.md, "Gates" and "Claim and execute"), liveness (the
//! replica and run heartbeats, the clock's samples, the leader lease and
//! the sweeper the leader runs, "Liveness"), webhook delivery
//! ("Notifications"), the schedules' ticker and the retention pruner.
//!
//! ```text
//!  submit/retry ──► PENDING ──promoter──► AVAILABLE ──claimer──► RUNNING ──worker──► DONE/FAILED
//!                     ▲   (gates, one replica           (one at a time,      (executors, logs,
//!                     │    at a time)                    free slots)          run heartbeat)
//!                     └──────────── automatic retry (backoff) ◄──────────────────────┘
//! ```
//!
//! Loops wake on [`crate::store::Signals`] (in-process commits and, on
//! PostgreSQL, other replicas' NOTIFYs) and fall back to polling every
//! `poll_interval`. Each loop is one file with a `run(self, shutdown)`
//! method and a `run_once` that tests call directly.

mod claimer;
mod clock_sync;
mod counters;
mod deliverer;
mod health;
mod last_words;
mod leader;
mod ledger;
mod ownership;
mod promoter;
mod pruner;
mod queue_repairer;
mod replica_heartbeat;
mod run_heartbeat;
mod schedule_ticker;
mod signal_forwarder;
mod sweeper;
mod worker;
mod write_trouble;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use self::claimer::Claimer;
pub use self::clock_sync::ClockSync;
pub use self::counters::{Claimant, RunCounters, RunCounts};
pub use self::deliverer::{DELIVERY_ROUND_BOUND, Deliverer, DeliveryConfig};
pub use self::health::{LoopHealth, Probe, Stalled};
pub use self::last_words::LastWords;
pub use self::leader::{LeaderLease, Leadership, round_interval};
pub use self::ledger::{DatabaseLedger, RunLedger};
pub use self::ownership::Ownership;
pub use self::promoter::Promoter;
pub use self::pruner::Pruner;
pub use self::replica_heartbeat::ReplicaHeartbeat;
use self::replica_heartbeat::register;
pub use self::run_heartbeat::{RunHandle, RunHeartbeat, RunTable};
pub use self::schedule_ticker::Ticker;
pub use self::signal_forwarder::SignalForwarder;
pub use self::sweeper::{PRUNE_AFTER, Sweeper};
pub use self::worker::Worker;
pub use self::write_trouble::WriteTrouble;
use crate::executor::Registry;
use crate::store::{ReplicaInfo, Store};
pub use domain::liveness::{
    DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_LEADER_LEASE, DEFAULT_STALE_AFTER, DEFAULT_SWEEP_INTERVAL,
};

/// At shutdown, how long a last write (finishes, the hand-back, the
/// lease's release, the heartbeat row's removal) may take: a database that
/// is gone must not keep the process from exiting. What could not be
/// written resolves itself: the lease expires, the row goes stale, the
/// sweeper fails or retries the runs.
pub const LAST_WRITE: std::time::Duration = std::time::Duration::from_secs(2);

/// Settings shared by a replica's loops.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Executions this replica runs at once. Default 16.
    pub workers: usize,
    /// Fallback wake-up when no signal arrives. Default 1 s.
    pub poll_interval: Duration,
    /// Replica and run heartbeat period. Default 2 s.
    pub heartbeat_interval: Duration,
    /// A replica (or a run) with no heartbeat for this long is stale.
    /// Default 10 s.
    pub stale_after: Duration,
    /// How long shutdown waits for running executions. Default 30 s.
    pub shutdown_grace: Duration,
    /// How often the leader sweeps RUNNING runs. Default 1 s.
    pub sweep_interval: Duration,
    /// How long a leader's lease lasts without renewal. Default 6 s.
    pub leader_lease: Duration,
    /// The most of one run's output stored, in bytes. Default 1 MiB.
    pub max_log_bytes: usize,
    /// How long finished plans are kept; `None` = forever. Default 30 days.
    pub retain_finished: Option<Duration>,
    /// Webhook signing and retries.
    pub delivery: DeliveryConfig,
}

pub const DEFAULT_WORKERS: usize = 16;
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
pub const DEFAULT_WEBHOOK_MAX_ATTEMPTS: u32 = 8;
pub const DEFAULT_RETAIN_FINISHED: Duration = Duration::from_secs(30 * 86_400);

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            workers: DEFAULT_WORKERS,
            poll_interval: DEFAULT_POLL_INTERVAL,
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            stale_after: DEFAULT_STALE_AFTER,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            sweep_interval: DEFAULT_SWEEP_INTERVAL,
            leader_lease: DEFAULT_LEADER_LEASE,
            max_log_bytes: crate::executor::output::DEFAULT_MAX_RUN_LOG_BYTES,
            retain_finished: Some(DEFAULT_RETAIN_FINISHED),
            delivery: DeliveryConfig {
                secret: None,
                max_attempts: DEFAULT_WEBHOOK_MAX_ATTEMPTS,
            },
        }
    }
}

impl SchedulerConfig {
    /// How far a claim (and each run heartbeat) pushes a run's heartbeat
    /// deadline when its task sets no timeout of its own.
    ///
    /// Two beats later than the replica's staleness: a run's last beat may
    /// come up to one (slightly stretched) interval before the replica's
    /// last one, so with this margin a dead replica's silence (the root
    /// cause) is always what the sweeper sees first and names, not each
    /// run's missed beat.
    pub fn run_heartbeat_timeout(&self) -> Duration {
        self.stale_after + 2 * self.heartbeat_interval
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        // The upper bound keeps a slot count a sane SQL LIMIT: a huge one
        // wrapped to a negative i64, which SQLite reads as no limit. None
        // is a replica that schedules and serves, and leaves the runs to
        // replicas with workers (docs/deploy.md).
        anyhow::ensure!(
            self.workers <= MAX_WORKERS,
            "BATON_WORKERS must be from 0 (run no tasks) to {MAX_WORKERS}, not {}",
            self.workers
        );
        // Checked first: the checks below and the loops multiply these,
        // and `18446744073709551615s` overflowed into a panic.
        for (name, value) in [
            ("BATON_POLL_INTERVAL", self.poll_interval),
            ("BATON_HEARTBEAT_INTERVAL", self.heartbeat_interval),
            ("BATON_STALE_AFTER", self.stale_after),
            ("BATON_SWEEP_INTERVAL", self.sweep_interval),
            ("BATON_LEADER_LEASE", self.leader_lease),
            ("BATON_SHUTDOWN_GRACE", self.shutdown_grace),
        ] {
            anyhow::ensure!(
                value <= MAX_TIMING,
                "{name} must be at most a day, not {}",
                humantime::format_duration(value)
            );
        }
        anyhow::ensure!(
            !self.poll_interval.is_zero(),
            "BATON_POLL_INTERVAL must be longer than zero"
        );
        anyhow::ensure!(
            !self.heartbeat_interval.is_zero() && self.heartbeat_interval * 2 <= self.stale_after,
            "BATON_HEARTBEAT_INTERVAL must be above zero and at most half of BATON_STALE_AFTER"
        );
        anyhow::ensure!(
            !self.sweep_interval.is_zero(),
            "BATON_SWEEP_INTERVAL must be longer than zero"
        );
        anyhow::ensure!(
            self.leader_lease >= Duration::from_millis(300),
            "BATON_LEADER_LEASE must be at least 300ms"
        );
        anyhow::ensure!(
            self.delivery.max_attempts >= 1,
            "BATON_WEBHOOK_MAX_ATTEMPTS must be at least 1"
        );
        Ok(())
    }
}

/// The most executions one replica runs at once.
pub const MAX_WORKERS: usize = 10_000;

/// The longest any liveness or loop timing may be.
const MAX_TIMING: Duration = Duration::from_secs(24 * 3600);

/// A new replica id: unique per process start (docs/design.md, "Domain").
pub fn new_replica_id() -> String {
    format!("r-{:08x}", fastrand::u32(..))
}

/// One replica's loops, running until `shutdown` fires.
pub struct Replica {
    /// Each loop; `Err` names a loop that panicked.
    tasks: JoinSet<Result<(), String>>,
    pub worker: Arc<Worker>,
    pub info: ReplicaInfo,
    pub leadership: Leadership,
    /// Whether each loop is completing rounds, for `/readyz`.
    pub health: Arc<LoopHealth>,
    /// Fires when the replica is told to stop.
    stopping: CancellationToken,
    /// Fires once the worker has drained (its runs finished or handed back).
    drained: CancellationToken,
    /// How long after the stop its loops may take to end at most: the
    /// grace, the executions' stop, the last writes. Once drained, the
    /// others get one last write's time. A loop still waiting on a
    /// database that is gone is left behind after that.
    stop_within: Duration,
}

impl Replica {
    /// Writes the first heartbeat (a replica executes nothing before), then
    /// starts the loops: on every replica the heartbeat, claimer, worker,
    /// webhook deliverer, queue repair and lease; on the leader also the
    /// promoter, the schedule ticker, the sweeper and the pruner.
    ///
    /// Shutdown order: `shutdown` stops claiming and leading at once (the
    /// lease is released so another replica leads without waiting); once
    /// the claimer and the promoter (whose rounds claim too) have returned
    /// (a claim in flight commits first), the worker drains within the
    /// grace period and hands back what is left; only then do the heartbeat
    /// (which deletes the replica's row) and the wake-up listener stop, so
    /// the sweeper never sees a draining replica as dead.
    pub async fn start(
        store: Arc<dyn Store>,
        info: ReplicaInfo,
        config: SchedulerConfig,
        registry: Registry,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Self> {
        config.validate()?;
        let stopping = shutdown.clone();
        register(store.as_ref(), &info, &shutdown).await?;
        let ledger = DatabaseLedger::over(store.clone());
        let worker = Arc::new(Worker::new(
            ledger.clone(),
            info.replica_id.clone(),
            registry,
            &config,
        ));
        let drained = CancellationToken::new();
        let drained_view = drained.clone();
        let health = LoopHealth::new();
        let mut loops = Loops {
            tasks: JoinSet::new(),
            shutdown: shutdown.clone(),
        };
        let probe = |name, interval| health.probe(name, interval);
        loops.spawn(
            "signals",
            Probe::detached(),
            SignalForwarder::new(store.clone(), config.poll_interval).run(drained.clone()),
        );
        let syncing = probe("clock", config.heartbeat_interval);
        loops.spawn(
            "clock",
            syncing.clone(),
            ClockSync::new(store.clone(), config.heartbeat_interval)
                .reporting_to(syncing)
                .run(drained.clone()),
        );
        // What the heartbeat sees of the database's trouble, the sweeper
        // judges with, should this replica lead.
        let trouble = WriteTrouble::default();
        let beat = probe("heartbeat", config.heartbeat_interval);
        loops.spawn(
            "heartbeat",
            beat.clone(),
            ReplicaHeartbeat::new(ledger.clone(), info.clone(), config.heartbeat_interval)
                .reporting_to(beat)
                .noting_trouble(trouble.clone())
                .proving(worker.ownership())
                .steering(worker.clone())
                .ending_with(worker.last_words())
                .run(drained.clone()),
        );
        loops.spawn(
            "ownership",
            Probe::detached(),
            worker.clone().watch_ownership(drained.clone()),
        );
        let (lease, leadership) =
            LeaderLease::new(store.clone(), info.replica_id.clone(), config.leader_lease);
        let leasing = probe("leader_lease", config.leader_lease);
        loops.spawn(
            "leader_lease",
            leasing.clone(),
            lease.reporting_to(leasing).run(shutdown.clone()),
        );
        // Fires once the claimer and the promoter (which claims too) have
        // both returned (or panicked): the worker drains from then on, not
        // from the signal. A claim in flight when the signal comes still
        // commits, and its runs must be among those the drain finishes or
        // hands back; draining at the signal, the worker could finish
        // first and leave them RUNNING under a replica that was gone, for
        // the sweeper to fail.
        let claims_stopped = CancellationToken::new();
        let claiming_done = Arc::new(claims_stopped.clone().drop_guard());
        // Unless the database is gone: a claim waiting on it a second
        // after the stop (a quarter of a shorter grace) is left behind (the
        // sweeper resolves its runs).
        tokio::spawn(drain_anyway(
            shutdown.clone(),
            claims_stopped.clone(),
            (config.shutdown_grace / 4).min(Duration::from_secs(1)),
        ));
        let promoting = probe("promoter", config.poll_interval);
        let promoter = Promoter::new(store.clone(), leadership.clone(), &config)
            .claiming_for(worker.clone(), info.labels.clone())
            .reporting_to(promoting.clone());
        let promoter_done = claiming_done.clone();
        let stop_promoting = shutdown.clone();
        loops.spawn("promoter", promoting, async move {
            let _done = promoter_done;
            promoter.run(stop_promoting).await;
        });
        let ticking = probe("ticker", config.poll_interval);
        loops.spawn(
            "ticker",
            ticking.clone(),
            Ticker::new(
                store.clone(),
                leadership.clone(),
                info.replica_id.clone(),
                &config,
            )
            .reporting_to(ticking)
            .run(shutdown.clone()),
        );
        let sweeping = probe("sweeper", config.sweep_interval);
        loops.spawn(
            "sweeper",
            sweeping.clone(),
            Sweeper::new(
                store.clone(),
                leadership.clone(),
                config.sweep_interval,
                config.stale_after,
            )
            .noting_trouble(trouble)
            .reporting_to(sweeping)
            .run(shutdown.clone()),
        );
        if let Some(retain) = config.retain_finished {
            let pruning = probe("pruner", crate::retention::PRUNE_EVERY);
            loops.spawn(
                "pruner",
                pruning.clone(),
                Pruner::new(store.clone(), leadership.clone(), retain)
                    .reporting_to(pruning)
                    .run(shutdown.clone()),
            );
        }
        let claiming = probe("claimer", config.poll_interval);
        let claimer = Claimer::new(ledger, worker.clone(), info.labels.clone(), &config)
            .reporting_to(claiming.clone());
        let claimer_done = claiming_done;
        let stop_claiming = shutdown.clone();
        loops.spawn("claimer", claiming, async move {
            let _done = claimer_done;
            claimer.run(stop_claiming).await;
        });
        let delivering = probe("deliverer", config.poll_interval + DELIVERY_ROUND_BOUND);
        loops.spawn(
            "deliverer",
            delivering.clone(),
            Deliverer::new(
                store.clone(),
                info.replica_id.clone(),
                config.delivery.clone(),
                config.poll_interval,
            )
            .reporting_to(delivering)
            .run(shutdown.clone()),
        );
        loops.spawn(
            "queue_repair",
            Probe::detached(),
            queue_repairer::QueueRepairer::new(store.clone(), config.sweep_interval)
                .run(shutdown.clone()),
        );
        let draining = worker.clone();
        let asked = shutdown.clone();
        loops.spawn("worker", Probe::detached(), async move {
            // Cancelled on unwind too: a panicking worker must still let
            // the heartbeat and listener stop, or join would never return.
            let _drained = drained.drop_guard();
            draining.run(claims_stopped, asked).await;
        });
        Ok(Replica {
            tasks: loops.tasks,
            worker,
            info,
            leadership,
            health,
            stopping,
            drained: drained_view,
            stop_within: config.shutdown_grace + worker::STOP_WAIT + 3 * LAST_WRITE,
        })
    }

    /// What the API shows of this replica's scheduler.
    pub fn view(&self) -> SchedulerView {
        SchedulerView {
            counters: self.worker.counters(),
            health: self.health.clone(),
            stopping: self.stopping.clone(),
        }
    }

    /// Waits until every loop has ended (after shutdown fired, or after a
    /// loop panicked and stopped the replica); an error names each loop
    /// that panicked, so `baton serve` exits non-zero and its supervisor
    /// restarts it.
    pub async fn join(mut self) -> anyhow::Result<()> {
        let mut panicked = Vec::new();
        let (drained, stop_within) = (self.drained.clone(), self.stop_within);
        let overdue = async {
            self.stopping.cancelled().await;
            tokio::select! {
                // The heartbeat row's removal shares the runs' last words;
                // loops still waiting on the database then are left.
                _ = drained.cancelled() => {
                    let done_by = self.worker.last_words().end_of_last_write();
                    tokio::time::sleep_until(tokio::time::Instant::from_std(done_by)).await;
                }
                _ = tokio::time::sleep(stop_within) => {}
            }
        };
        tokio::pin!(overdue);
        loop {
            let result = tokio::select! {
                result = self.tasks.join_next() => result,
                _ = &mut overdue => {
                    tracing::error!(
                        loops = self.tasks.len(),
                        "loops still waiting on the database after the stop; leaving them"
                    );
                    self.tasks.abort_all();
                    break;
                }
            };
            match result {
                None => break,
                Some(Ok(Ok(()))) => {}
                Some(Ok(Err(e))) => panicked.push(e),
                Some(Err(e)) => panicked.push(e.to_string()),
            }
        }
        anyhow::ensure!(panicked.is_empty(), "{}", panicked.join("; "));
        Ok(())
    }
}

/// A replica's scheduler as `/metrics` and `/readyz` read it.
#[derive(Clone, Default)]
pub struct SchedulerView {
    pub counters: Arc<RunCounters>,
    pub health: Arc<LoopHealth>,
    /// Fires when the replica stops: the dashboard's live feeds end with
    /// it, or the HTTP server's graceful shutdown would wait on open tabs.
    pub stopping: CancellationToken,
}

/// Spawns a replica's loops so that a panicking one stops the whole
/// replica: a leader whose promoter died but whose lease loop renews would
/// look healthy while scheduling nothing, on every leader in turn.
struct Loops {
    tasks: JoinSet<Result<(), String>>,
    shutdown: CancellationToken,
}

impl Loops {
    fn spawn(
        &mut self,
        name: &'static str,
        probe: Probe,
        body: impl Future<Output = ()> + Send + 'static,
    ) {
        let shutdown = self.shutdown.clone();
        self.tasks.spawn(async move {
            let Err(e) = tokio::spawn(body).await else {
                return Ok(());
            };
            let panic = match e.try_into_panic() {
                Ok(payload) => panic_text(payload.as_ref()),
                Err(e) => e.to_string(),
            };
            tracing::error!(
                loop_name = name,
                %panic,
                "a scheduler loop panicked; stopping this replica (it gives up the leader lease and exits non-zero for its supervisor to restart)"
            );
            probe.crashed(panic.clone());
            shutdown.cancel();
            Err(format!("the {name} loop panicked: {panic}"))
        });
    }
}

pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// Cancels `claims_stopped` `after` `shutdown` (a second, or a quarter of
/// a shorter grace) if the claimer and the promoter have not returned by
/// then (a claim waiting on a database that is gone; one that answers
/// takes milliseconds), so the worker drains within its grace anyway.
async fn drain_anyway(
    shutdown: CancellationToken,
    claims_stopped: CancellationToken,
    after: Duration,
) {
    shutdown.cancelled().await;
    tokio::select! {
        _ = claims_stopped.cancelled() => {}
        _ = tokio::time::sleep(after) => {
            tracing::warn!("a claim is still waiting on the database; draining without it");
            claims_stopped.cancel();
        }
    }
}
