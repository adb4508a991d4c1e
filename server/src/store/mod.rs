//! The store seam: everything Baton keeps, behind one trait with a
//! PostgreSQL and a SQLite implementation.
//!
//! Methods are named noun-then-verb (`run_claim_many`). Every status change
//! is one conditional UPDATE (`WHERE status = <expected>`) and appends to the
//! event history in the same transaction. Writes an executing replica makes
//! to its run are fenced: they only apply while the run is RUNNING and owned
//! by that replica. `now` is passed in so tests control time.
//!
//! sqlx cannot check queries against two databases at compile time; the
//! conformance suite in `tests/conformance/`, run against both backends, is
//! what proves they behave the same.

pub mod clock;
mod engine;
mod postgres;
pub mod signals;
mod sqlite;
pub mod submission;

use std::sync::Arc;
use std::time::Duration;

use domain::audit::Person;
use domain::gates::NodeLabels;
use domain::model::{DeliveryView, EventView, PlanList, PlanStatus, PlanView, RunStatus, RunView};
use domain::time::Ts;

pub use self::engine::gates::node_labels;
pub use self::engine::liveness::{LEADER as LEADER_LEASE, Lease, SWEEP_BLOCKED_AFTER, SweepReport};
pub use self::engine::notifications::{
    DeliveryOutcome, DueDelivery, Notified, NotifyTargets, PIPELINE_COMPLETED, PIPELINE_FAILED,
};
pub use self::engine::reads::overview::{CHART_MINUTES, OverviewStats, RECENT_FAILURES};
pub use self::engine::reads::run_search_sql::PROBE_IDS as RUN_SEARCH_PROBE_IDS;
pub use self::engine::reads::stored_plan::{StoredPlan, StoredPlanRow, StoredTask};
pub use self::engine::retention::{
    BATCH_RUNS as PRUNE_BATCH_RUNS, Prunable, PruneCursor, PruneReport, PruneScan,
};
pub use self::engine::schedules::TickReport;
pub use self::engine::sessions::Session;
pub use self::postgres::PgStore;
pub use self::signals::{Signal, Signals};
pub use self::sqlite::{ServeLock, SqliteStore};
pub use self::submission::{IdempotencyKey, Submitted};
use crate::plan::NewPlan;
use crate::schedule::NewSchedule;

/// Errors the store reports to its callers.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{what} {id} does not exist")]
    NotFound { what: &'static str, id: i64 },
    /// The action does not apply to the current status.
    #[error("{0}")]
    Conflict(String),
    /// This actor may not take the action (an approver list, two-person
    /// approval).
    #[error("{0}")]
    Forbidden(String),
    /// An argument is out of range; nothing was changed.
    #[error("{0}")]
    Invalid(String),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Something in the database that Baton itself could not have written.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// A heartbeat waited its bound for SQLite's write lock, which another
    /// program or a long write holds (PostgreSQL says so with
    /// [`LOCK_NOT_AVAILABLE`]).
    #[error("held up by the database's write lock")]
    LockWait,
    /// An agent's replica did not take the write: unreachable, stopping,
    /// or answering an error (docs/agents.md). The same write may succeed
    /// shortly, through another replica.
    #[error("{0}")]
    Remote(String),
}

/// PostgreSQL's `lock_not_available`: a `lock_timeout` ran out.
pub(crate) const LOCK_NOT_AVAILABLE: &str = "55P03";

impl StoreError {
    /// A heartbeat's write waited its bound for a lock another client holds
    /// (PostgreSQL's `lock_timeout` on `LOCK TABLE` or a row held
    /// `FOR UPDATE`; SQLite's write lock):
    /// the database answers, and whatever holds the row or table from this
    /// replica holds it from the sweeper too (docs/design.md, "Liveness").
    pub fn is_lock_wait(&self) -> bool {
        matches!(self, StoreError::LockWait)
            || matches!(self, StoreError::Database(sqlx::Error::Database(db))
                if db.code().as_deref() == Some(LOCK_NOT_AVAILABLE)
                    && db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_none())
    }

    /// The database could not be reached or could not take the write (a
    /// refused or killed connection, no connection free in time, a full
    /// disk): nothing is wrong with the request, and the same request may
    /// succeed shortly. The API answers 503 for these, not 500.
    pub fn is_unavailable(&self) -> bool {
        let StoreError::Database(e) = self else {
            return false;
        };
        match e {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(db) => {
                let Some(code) = db.code() else {
                    return false;
                };
                if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                    // SQLITE_BUSY (5) past the busy timeout, SQLITE_IOERR
                    // (10) and SQLITE_FULL (13), extended codes included.
                    code.parse::<i32>()
                        .is_ok_and(|n| matches!(n & 0xff, 5 | 10 | 13))
                } else {
                    // PostgreSQL: connection exceptions (class 08), an
                    // administrator's or a shutdown's termination
                    // (57P01–03), too many connections (53300), disk full
                    // (53100).
                    code.starts_with("08")
                        || matches!(
                            code.as_ref(),
                            "57P01" | "57P02" | "57P03" | "53300" | "53100"
                        )
                }
            }
            _ => false,
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Which database a store talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// What a replica asks for when it claims runs.
#[derive(Debug, Clone)]
pub struct Claim<'a> {
    pub replica_id: &'a str,
    /// Node labels this replica carries; pinned runs need one of them.
    pub labels: &'a [String],
    /// Free worker slots.
    pub limit: i64,
    /// Heartbeat deadline for runs whose task sets none.
    pub heartbeat_timeout: Duration,
}

/// Who a promotion round may claim for. Asked only once the round has
/// runs to promote, just before it writes them: a round with none takes
/// nothing from the replica, whose claimer may be waiting for its turn.
pub trait RoundClaims: Send + Sync {
    /// The claim, or `None` when the replica takes nothing now.
    fn claim(&self) -> Option<Claim<'_>>;
}

impl RoundClaims for Claim<'_> {
    fn claim(&self) -> Option<Claim<'_>> {
        Some(self.clone())
    }
}

/// A run a replica has just claimed, with what it needs to execute it.
#[derive(Debug, Clone)]
pub struct ClaimedRun {
    pub id: i64,
    pub task_id: i64,
    pub plan_id: i64,
    pub attempt: i64,
    /// The task's executor spec: `{"kind": "...", ...}`.
    pub executor: serde_json::Value,
    pub started_at: Ts,
    pub deadline: Ts,
    /// The task's own run heartbeat period; `None` = the replica's.
    pub heartbeat_interval: Option<Duration>,
    /// How far each run heartbeat pushes `heartbeat_deadline`.
    pub heartbeat_timeout: Duration,
}

/// How an execution ended, as reported by the replica that ran it.
#[derive(Debug, Clone)]
pub struct Finish {
    pub run_id: i64,
    /// DONE or FAILED; CANCELED confirms a kill an operator asked for.
    pub status: RunStatus,
    /// Exit code or HTTP status.
    pub result_code: Option<i64>,
    pub error: Option<String>,
}

/// What [`Store::run_finish_many`] did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct FinishReport {
    /// Runs moved from RUNNING to their final status.
    pub finished: Vec<i64>,
    /// Runs this replica no longer owns (cancelled, swept): nothing written.
    pub fenced: Vec<i64>,
    /// Of those, runs the sweeper had failed whose command exited 0: their
    /// error now says the command succeeded after all.
    pub succeeded_late: Vec<i64>,
    /// New PENDING attempts created by automatic retry.
    pub retried: Vec<i64>,
    /// Plans whose notification these finishes claimed.
    pub notified: Vec<Notified>,
}

/// What one promotion round did.
#[derive(Debug, Default, Clone)]
pub struct PromoteReport {
    /// Runs that left PENDING, those [`PromoteReport::claimed`] included.
    pub promoted: usize,
    pub waiting: usize,
    /// Promoted runs the round claimed for the replica it was asked to
    /// claim for, in id order; they are RUNNING now.
    pub claimed: Vec<ClaimedRun>,
    /// When the claimed runs' start was stamped (just before the round
    /// wrote them), for [`crate::loops::Worker::spawn_all`].
    pub claimed_at: Option<std::time::Instant>,
    /// The promotion lock was taken (by another replica's round, a
    /// submit's admission or a brake): this round judged nothing, and
    /// the wake-up it answered is still owed a round.
    pub lock_busy: bool,
}

/// One captured line of a command's output.
#[derive(Debug, Clone)]
pub struct LogLine {
    pub at: Ts,
    /// `stdout` or `stderr`.
    pub stream: &'static str,
    pub line: String,
}

/// What one run heartbeat found; a run in none of the lists is no longer
/// the replica's.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Beaten {
    /// Still the replica's: their deadlines moved.
    pub owned: Vec<i64>,
    /// Still the replica's, deadlines moved, but an operator asked to
    /// cancel them: the replica stops their executions and its finish
    /// records them CANCELED.
    pub canceling: Vec<i64>,
    /// Rows another client held for the whole lock timeout (an outside
    /// `SELECT … FOR UPDATE`): neither extended nor lost. The beat waited
    /// in the row's lock queue, after beating the replica's other runs, so
    /// one held row delays only its own run; and as the sweeper cannot take
    /// a held row either, the wait is as good as recorded.
    pub held: Vec<i64>,
}

/// A replica's identity, as written by its heartbeat.
#[derive(Debug, Clone)]
pub struct ReplicaInfo {
    pub replica_id: String,
    pub hostname: String,
    pub labels: Vec<String>,
    pub version: String,
    pub started_at: Ts,
}

/// A replica row with how many runs it is executing.
#[derive(Debug, Clone)]
pub struct ReplicaRecord {
    pub info: ReplicaInfo,
    pub last_heartbeat: Ts,
    /// Its host's clock minus the database's at that heartbeat
    /// ([`domain::time::clock::skew`]).
    pub clock_skew_ms: i64,
    /// Set while an operator drains it: since when, by whom.
    pub draining: Option<(Ts, String)>,
    pub running: i64,
}

/// Who made a change: the name recorded on its events (a person's, or
/// the scheduler's or a replica's for the engine's own transitions).
pub type Actor<'a> = &'a str;

/// The actor name the engine uses for its own transitions.
pub const SCHEDULER: &str = "scheduler";

/// Exponential backoff before automatic retry number `attempt` (the attempt
/// that failed): 1 s, 2 s, 4 s, … capped at 10 minutes.
pub fn retry_backoff(failed_attempt: i64) -> Duration {
    let exp = failed_attempt.clamp(1, 20) as u32 - 1;
    Duration::from_secs(1u64 << exp).min(Duration::from_secs(600))
}

#[async_trait::async_trait]
pub trait Store: Send + Sync + 'static {
    fn backend(&self) -> Backend;

    /// Wake-ups raised by this store's commits (and, on PostgreSQL, by other
    /// replicas' commits once [`Store::signals_forward`] runs).
    fn signals(&self) -> &Arc<Signals>;

    /// Where notifications go (`BATON_WEBHOOK_URL`, `BATON_PUBLIC_URL`);
    /// set at start-up, before any run finishes.
    fn notify_targets_set(&self, targets: NotifyTargets);

    /// Which commands this server runs (`BATON_ALLOWED_COMMANDS`,
    /// `BATON_DISABLE_COMMANDS`), for the plans schedules make; set at
    /// start-up. Unset: any.
    fn command_policy_set(&self, commands: crate::plan::CommandPolicy);

    /// Forwards other replicas' NOTIFYs to [`Store::signals`] until the
    /// connection fails, having raised every signal once when it starts
    /// listening (what was announced before passed it by); never returns
    /// on SQLite (one process, nothing to hear).
    async fn signals_forward(&self) -> Result<()>;

    /// Applies pending migrations (idempotent).
    async fn migrate(&self) -> Result<()>;

    /// The database answers and every migration is applied.
    async fn ready(&self) -> Result<()>;

    /// The database server's clock now; `None` where the database has no
    /// clock of its own (SQLite, a file on this host). See [`clock`].
    async fn database_clock(&self) -> Result<Option<Ts>>;

    // ---- plans and tasks ----

    /// Stores a validated plan; creates PENDING runs when `plan.start`.
    async fn plan_insert(&self, plan: &NewPlan, by: Person<'_>, now: Ts) -> Result<i64>;
    /// [`Store::plan_insert`] once per key: a key seen within
    /// [`submission::IDEMPOTENCY_WINDOW`] with the same document answers the
    /// plan it made, with another document [`Submitted::KeyReused`]. Two
    /// submits racing with one key make one plan.
    async fn plan_insert_keyed(
        &self,
        plan: &NewPlan,
        by: Person<'_>,
        now: Ts,
        key: &IdempotencyKey<'_>,
    ) -> Result<Submitted>;
    async fn plan_get(&self, id: i64) -> Result<PlanView>;
    /// The plan as submitted, read back from its rows (for its task
    /// definitions and its export).
    async fn plan_stored(&self, id: i64) -> Result<StoredPlan>;
    /// [`Store::plan_stored`] for its file, which holds the plan's
    /// secrets: `by` reading it is recorded in the audit log.
    async fn plan_export(&self, id: i64, by: Person<'_>, now: Ts) -> Result<StoredPlan>;
    /// Tasks as submitted: those of `ids` that exist, in id order.
    async fn tasks_stored(&self, ids: &[i64]) -> Result<Vec<StoredTask>>;
    /// Plans newest first: those in `status` whose name contains `name`
    /// (any case), and how many match in all.
    async fn plan_list(
        &self,
        status: Option<PlanStatus>,
        name: Option<&str>,
        limit: i64,
        offset: i64,
    ) -> Result<PlanList>;
    /// Creates PENDING runs for every NOT_STARTED task of the plan.
    async fn plan_start(&self, id: i64, by: Person<'_>, now: Ts) -> Result<()>;
    /// New attempts for every FAILED or CANCELED task of the plan.
    async fn plan_retry(&self, id: i64, by: Person<'_>, now: Ts) -> Result<()>;
    /// Cancels every PENDING, AVAILABLE or RUNNING run of the plan.
    async fn plan_cancel(&self, id: i64, by: Person<'_>, now: Ts) -> Result<()>;
    /// New attempt of a FAILED or CANCELED task; returns its plan id.
    async fn task_retry(&self, id: i64, by: Person<'_>, now: Ts) -> Result<i64>;
    /// Cancels the task's PENDING, AVAILABLE or RUNNING run; returns its plan id.
    async fn task_cancel(&self, id: i64, by: Person<'_>, now: Ts) -> Result<i64>;
    /// Marks a NOT_STARTED, FAILED or CANCELED task SKIPPED; returns its plan id.
    async fn task_skip(&self, id: i64, by: Person<'_>, now: Ts) -> Result<i64>;
    /// Approves a task waiting for approval (with its stage, for a stage's
    /// approval); returns its plan id and how many tasks were approved.
    async fn task_approve(&self, id: i64, by: Person<'_>, now: Ts) -> Result<(i64, usize)>;
    /// Approves every task of the plan waiting for approval; how many.
    async fn plan_approve(&self, id: i64, by: Person<'_>, now: Ts) -> Result<usize>;
    /// Stops promoting the plan's runs until [`Store::plan_resume`].
    async fn plan_pause(&self, id: i64, by: Person<'_>, now: Ts) -> Result<()>;
    async fn plan_resume(&self, id: i64, by: Person<'_>, now: Ts) -> Result<()>;

    // ---- targets ----

    /// Stops promoting runs on `target`, in every plan.
    async fn target_pause(&self, target: &str, by: Person<'_>, now: Ts) -> Result<()>;
    async fn target_resume(&self, target: &str, by: Person<'_>, now: Ts) -> Result<()>;
    /// At most `capacity` runs hold `target` at once; `None` = no limit.
    async fn target_capacity_set(
        &self,
        target: &str,
        capacity: Option<i64>,
        by: Person<'_>,
        now: Ts,
    ) -> Result<()>;
    /// Targets with live runs or settings, by name.
    async fn target_list(&self) -> Result<Vec<domain::model::TargetView>>;
    /// Every paused plan and target.
    async fn paused_list(&self) -> Result<domain::model::PausedView>;
    /// Every paused plan, the oldest pause first.
    async fn paused_plans(&self) -> Result<Vec<domain::model::PausedPlan>>;
    /// Plans with tasks waiting for approval (and nothing else), the
    /// oldest plan first: `(plan id, plan name, tasks waiting)`.
    async fn approvals_waiting(&self, limit: i64) -> Result<Vec<(i64, String, i64)>>;

    // ---- schedules (engine/schedules.rs) ----

    /// Stores a schedule; its first tick is the first after `now`.
    async fn schedule_create(&self, schedule: &NewSchedule, by: Person<'_>, now: Ts)
    -> Result<i64>;
    /// Replaces a schedule's definition (a new expression or zone starts
    /// from the first tick after `now`).
    async fn schedule_update(
        &self,
        id: i64,
        schedule: &NewSchedule,
        by: Person<'_>,
        now: Ts,
    ) -> Result<()>;
    /// Deletes a schedule and its tick records; its plans stay.
    async fn schedule_delete(&self, id: i64, by: Person<'_>, now: Ts) -> Result<()>;
    async fn schedule_pause(&self, id: i64, by: Person<'_>, now: Ts) -> Result<()>;
    /// Resumes from the first tick after `now`.
    async fn schedule_resume(&self, id: i64, by: Person<'_>, now: Ts) -> Result<()>;
    /// Makes and starts a plan from the schedule now; its id.
    async fn schedule_trigger(&self, id: i64, by: Person<'_>, now: Ts) -> Result<i64>;
    /// One round (leader): every due tick up to `now` makes exactly one
    /// plan; ticks later than `grace` were missed.
    async fn schedule_fire_due(
        &self,
        replica: &str,
        grace: Duration,
        now: Ts,
    ) -> Result<TickReport>;
    async fn schedule_get(&self, id: i64) -> Result<domain::model::ScheduleView>;
    /// Every schedule, by name.
    async fn schedule_list(&self) -> Result<Vec<domain::model::ScheduleView>>;

    // ---- the scheduler ----

    /// One promotion round (docs/design.md, "Gates"), serialised across
    /// replicas. With a `claim` that grants one, the round also claims for
    /// that replica, up to its limit, the promoted runs it may execute,
    /// oldest first: they go from PENDING to RUNNING in the round's
    /// transaction, with both events, instead of waiting AVAILABLE for a
    /// claimer to wake and ask.
    async fn run_promote_round(
        &self,
        nodes: &NodeLabels,
        claim: Option<&dyn RoundClaims>,
        now: Ts,
    ) -> Result<PromoteReport>;
    /// Claims up to `claim.limit` AVAILABLE runs this replica may execute.
    async fn run_claim_many(&self, claim: &Claim<'_>, now: Ts) -> Result<Vec<ClaimedRun>>;
    /// The node labels AVAILABLE runs are pinned to (nearly always none).
    async fn run_available_nodes(&self) -> Result<Vec<String>>;
    /// Records how executions ended (fenced), creating automatic retries.
    async fn run_finish_many(
        &self,
        replica_id: &str,
        finishes: &[Finish],
        now: Ts,
    ) -> Result<FinishReport>;
    /// Extends the heartbeat deadline of the replica's runs, each by its
    /// own heartbeat timeout (fenced): which it still owns, and which it
    /// could not tell because another transaction holds their rows.
    async fn run_heartbeat_many(
        &self,
        replica_id: &str,
        beats: &[(i64, Duration)],
        now: Ts,
    ) -> Result<Beaten>;
    /// Appends log lines (fenced); false when the replica lost the run.
    async fn run_log_append(
        &self,
        replica_id: &str,
        run_id: i64,
        lines: &[LogLine],
    ) -> Result<bool>;
    async fn run_get(&self, id: i64) -> Result<RunView>;
    /// Runs matching `filter` with ids below `before`, newest first, at
    /// most `limit` (the runs search).
    async fn run_search(
        &self,
        filter: &domain::filter::run::RunFilter,
        before: Option<i64>,
        limit: i64,
    ) -> Result<domain::search::RunList>;
    /// How many runs `filter` matches that `action` applies to (up to
    /// 10,001).
    async fn run_bulk_count(
        &self,
        filter: &domain::filter::run::RunFilter,
        action: domain::search::BulkAction,
    ) -> Result<i64>;
    /// [`Store::run_bulk_count`] for Retry/Skip and for Cancel.
    async fn run_bulk_counts(
        &self,
        filter: &domain::filter::run::RunFilter,
    ) -> Result<domain::search::BulkCounts> {
        use domain::search::BulkAction;
        Ok(domain::search::BulkCounts {
            ended_badly: self.run_bulk_count(filter, BulkAction::Retry).await?,
            live: self.run_bulk_count(filter, BulkAction::Cancel).await?,
        })
    }
    /// Applies `action` to every run `filter` matches that it applies to,
    /// in one transaction, if they are `expected` in number (a conflict
    /// naming both counts otherwise, and nothing changes).
    async fn run_bulk(
        &self,
        filter: &domain::filter::run::RunFilter,
        action: domain::search::BulkAction,
        expected: i64,
        by: Person<'_>,
        now: Ts,
    ) -> Result<domain::search::BulkResult>;
    /// How many runs `action` would change in the plans `filter` matches
    /// (up to 10,001), and in how many plans.
    async fn plan_bulk_count(
        &self,
        filter: &domain::search::PlanFilter,
        action: domain::search::BulkAction,
    ) -> Result<domain::search::PlanBulkCount>;
    /// [`Store::plan_bulk_count`] for Retry/Skip and for Cancel.
    async fn plan_bulk_counts(
        &self,
        filter: &domain::search::PlanFilter,
    ) -> Result<domain::search::PlanBulkCounts> {
        use domain::search::BulkAction;
        Ok(domain::search::PlanBulkCounts {
            ended_badly: self.plan_bulk_count(filter, BulkAction::Retry).await?,
            live: self.plan_bulk_count(filter, BulkAction::Cancel).await?,
        })
    }
    /// [`Store::run_bulk`] on the runs of the plans `filter` matches (the
    /// plans list's filter), bound to the number of runs, `expected`.
    async fn plan_bulk(
        &self,
        filter: &domain::search::PlanFilter,
        action: domain::search::BulkAction,
        expected: i64,
        by: Person<'_>,
        now: Ts,
    ) -> Result<domain::search::BulkResult>;
    async fn run_log(&self, id: i64) -> Result<String>;
    /// The last `limit` lines of a run's log and how many it has in all.
    async fn run_log_tail(&self, id: i64, limit: i64) -> Result<domain::views::LogTail>;
    /// Live run counts, runs finished per minute over the last hour, and
    /// the latest failures (the dashboard's overview).
    async fn overview_stats(&self, now: Ts) -> Result<OverviewStats>;
    /// Events with id > `after_id`, oldest first (history checks, timelines).
    async fn event_list(&self, after_id: i64, limit: i64) -> Result<Vec<EventView>>;

    // ---- liveness (docs/design.md, "Liveness") ----

    /// Fails every RUNNING run whose replica is stale or gone, or whose
    /// heartbeat deadline or hard deadline passed, creating automatic
    /// retries; a run an operator asked to cancel ends CANCELED instead.
    /// Conditional on the run still being RUNNING on that replica. Judged
    /// earlier than `now` by the time the database could not be written
    /// lately, as the database remembers it and as `troubled_at` (this
    /// leader's latest round that failed or waited) adds to it; a round
    /// kept waiting for its table locks judges nothing.
    async fn run_sweep(
        &self,
        stale_after: Duration,
        troubled_at: Option<Ts>,
        now: Ts,
    ) -> Result<SweepReport>;
    /// Drops the pin of every AVAILABLE run whose node label no live
    /// replica carried for its `reassign_after` (its replica died or handed
    /// it back at shutdown), so another replica may claim it. Returns the
    /// ids unpinned.
    async fn run_unpin_stranded(&self, stale_after: Duration, now: Ts) -> Result<Vec<i64>>;
    /// While a replica of an older build may write, brings the queue of
    /// AVAILABLE runs back in line with the runs' statuses
    /// (`engine::queue_repair`): how many queue rows changed, or `None`
    /// when no such replica may write and nothing was looked at.
    async fn run_queue_repair(&self, now: Ts) -> Result<Option<u64>>;
    /// Graceful shutdown: the replica's runs go back to AVAILABLE, same
    /// attempt (fenced). Returns the ids handed back.
    async fn run_hand_back_many(
        &self,
        replica_id: &str,
        run_ids: &[i64],
        detail: &str,
        now: Ts,
    ) -> Result<Vec<i64>>;
    /// Takes the named lease if it is free or expired, or renews it if
    /// `holder` has it; returns the lease as it now stands (held by
    /// `holder` or by someone else).
    async fn lease_acquire(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
        now: Ts,
    ) -> Result<Lease>;
    /// Gives the lease up at once (graceful shutdown), if `holder` has it.
    async fn lease_release(&self, name: &str, holder: &str) -> Result<()>;
    async fn lease_get(&self, name: &str) -> Result<Option<Lease>>;

    // ---- notifications (docs/design.md, "Notifications") ----

    /// Takes up to `limit` due deliveries for this replica to send, locked
    /// to it for `lock_for` (SKIP LOCKED on PostgreSQL).
    async fn delivery_take_due(
        &self,
        replica_id: &str,
        limit: i64,
        lock_for: Duration,
        now: Ts,
    ) -> Result<Vec<DueDelivery>>;
    /// Keeps one attempt's status and error, and what happens next.
    async fn delivery_record(
        &self,
        replica_id: &str,
        delivery: &DueDelivery,
        outcome: &DeliveryOutcome,
        now: Ts,
    ) -> Result<()>;
    /// Deliveries with their attempts, newest first; one plan's or all.
    async fn delivery_list(&self, plan_id: Option<i64>, limit: i64) -> Result<Vec<DeliveryView>>;

    // ---- replicas ----

    /// Writes the worker's heartbeat row; whether an operator drains it.
    async fn replica_upsert(&self, replica: &ReplicaInfo, now: Ts) -> Result<bool>;
    async fn replica_list(&self) -> Result<Vec<ReplicaRecord>>;
    /// Starts (`drain`) or ends an operator's drain of a replica or agent:
    /// while draining it takes no new run and its labels count as gone
    /// for pinned tasks. False when it has no heartbeat row; draining one
    /// already draining (or resuming one that is not) is a conflict.
    async fn replica_drain(
        &self,
        worker_id: &str,
        drain: bool,
        by: Person<'_>,
        now: Ts,
    ) -> Result<bool>;
    /// The ids of every worker an operator drains.
    async fn replicas_draining(&self) -> Result<Vec<String>>;
    async fn replica_delete(&self, replica_id: &str) -> Result<()>;
    /// Deletes heartbeat rows last written before `before`; returns how many.
    async fn replica_prune(&self, before: Ts) -> Result<u64>;

    // ---- retention ----

    /// Looks at up to `limit` plans created before `cutoff`, oldest first
    /// (after `from`), and returns those that may be pruned: every task
    /// terminal, nothing changed since `cutoff`, not queued, no webhook
    /// delivery pending.
    async fn plan_prune_scan(
        &self,
        cutoff: Ts,
        from: Option<PruneCursor>,
        limit: i64,
    ) -> Result<PruneScan>;
    /// Deletes those of `ids` that may still be pruned, with their tasks,
    /// runs, events, logs, notification claims and deliveries, in one
    /// transaction.
    async fn plan_prune(&self, ids: &[i64], cutoff: Ts) -> Result<PruneReport>;

    // ---- dashboard sessions (docs/design.md, "Authorization") ----

    /// Stores a new sign-in by `by` (audited), and deletes the sessions
    /// expired by `now`.
    async fn session_insert(&self, session: &Session, by: Person<'_>, now: Ts) -> Result<()>;
    /// The session with this token hash, unless it has expired by `now`.
    async fn session_get(&self, token_hash: &str, now: Ts) -> Result<Option<Session>>;
    /// Ends a session (sign-out by `by`, audited); nothing happens when it
    /// is already gone.
    async fn session_delete(&self, token_hash: &str, by: Person<'_>, now: Ts) -> Result<()>;

    // ---- the audit log (engine/audit.rs) ----

    /// Entries `filter` matches with ids below `before`, newest first, at
    /// most `limit`.
    async fn audit_list(
        &self,
        filter: &domain::filter::audit::AuditFilter,
        before: Option<i64>,
        limit: i64,
    ) -> Result<domain::audit::AuditList>;
    /// Records a sign-in refused for a wrong name or password (`by.name`
    /// is the name tried).
    async fn audit_sign_in_failed(&self, by: Person<'_>, reason: &str, now: Ts) -> Result<()>;
    /// Deletes up to `limit` entries older than `cutoff`, oldest first
    /// (retention); how many.
    async fn audit_prune(&self, cutoff: Ts, limit: i64) -> Result<u64>;
}

/// Opens the database a URL names: `postgres://…` or `sqlite://…`.
pub async fn connect(url: &str) -> anyhow::Result<Arc<dyn Store>> {
    connect_replica(url, None).await
}

/// [`connect`] for a replica serving and scheduling: on PostgreSQL a
/// transaction it leaves idle for `stale_after` is aborted by the server
/// ([`PgStore::connect_with`]).
pub async fn connect_replica(
    url: &str,
    stale_after: Option<Duration>,
) -> anyhow::Result<Arc<dyn Store>> {
    use anyhow::Context;
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let store = PgStore::connect_with(url, stale_after)
            .await
            .with_context(|| format!("cannot connect to PostgreSQL at {}", redact(url)))?;
        // Before anything is stamped: every time this process writes or
        // compares is the database's ([`clock`]).
        clock::anchor(&store)
            .await
            .context("reading the database's clock")?;
        Ok(Arc::new(store))
    } else if let Some(path) = sqlite_file(url) {
        let path = path?;
        let store = SqliteStore::open(path)
            .await
            .with_context(|| format!("cannot open SQLite database {path}"))?;
        Ok(Arc::new(store))
    } else {
        anyhow::bail!(
            "BATON_DATABASE_URL must start with postgres:// or sqlite:// (got {})",
            redact(url)
        )
    }
}

/// The file a `sqlite://` URL names (`None`: not a SQLite URL). Baton opens it itself, read-write in
/// WAL mode, so URL options are refused rather than taken as part of the
/// file name (`baton.db?mode=ro` had created a file of that name), and an
/// in-memory database is refused: each pooled connection would get its
/// own, empty one, and everything would be gone at exit.
pub fn sqlite_file(url: &str) -> Option<anyhow::Result<&str>> {
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    Some(sqlite_path(path))
}

fn sqlite_path(path: &str) -> anyhow::Result<&str> {
    anyhow::ensure!(
        !path.is_empty(),
        "BATON_DATABASE_URL names no SQLite file: write sqlite://PATH (sqlite://./data/baton.db)"
    );
    anyhow::ensure!(
        path != ":memory:",
        "BATON_DATABASE_URL asks for an in-memory SQLite database, which Baton cannot use: \
         its pool's connections would each see a different, empty database, and every plan \
         would be lost at exit. Name a file: sqlite://PATH"
    );
    anyhow::ensure!(
        !path.contains('?') && !path.contains('#'),
        "BATON_DATABASE_URL `sqlite://{path}` carries options after `?` or `#`; Baton opens \
         the file itself (read-write, WAL) and takes none. Name only the file: sqlite://PATH"
    );
    Ok(path)
}

/// The URL as messages, logs and pages may show it: the password after a
/// user name masked, an http(s) user name standing alone (a token, as in
/// `https://TOKEN@host/`) masked, and the values of query and fragment
/// parameters whose names say secret (`password`, `token`, `api_key`,
/// `sig`, …) masked. The host stays as written: only the authority before
/// the path is read for credentials, so an `@` in the query cannot pass
/// for one and hide where the URL goes.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return redact_parameters(url);
    };
    let (scheme, rest) = (&url[..scheme_end], &url[scheme_end + 3..]);
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, after) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") => {
                format!("***@{host}")
            }
            None => format!("{userinfo}@{host}"),
        },
        None => authority.to_owned(),
    };
    format!("{scheme}://{authority}{}", redact_parameters(after))
}

/// `path?query#fragment` with the values of secret-named parameters
/// masked.
fn redact_parameters(text: &str) -> String {
    let Some(start) = text.find(['?', '#']) else {
        return text.to_owned();
    };
    let (path, rest) = text.split_at(start);
    let mut out = String::with_capacity(text.len());
    out.push_str(path);
    // Separators (`?`, `#`, `&`, `;`) stay; each `name=value` between them
    // is looked at on its own.
    let mut pair = String::new();
    for c in rest.chars() {
        if matches!(c, '?' | '#' | '&' | ';') {
            out.push_str(&redact_pair(&pair));
            pair.clear();
            out.push(c);
        } else {
            pair.push(c);
        }
    }
    out.push_str(&redact_pair(&pair));
    out
}

/// Whether a parameter, variable or flag called `name` holds a secret
/// (`password`, `api_key`, `X-Amz-Signature`, `--auth-token`).
pub fn names_a_secret(name: &str) -> bool {
    const SECRET_WORDS: [&str; 9] = [
        "pass",
        "pwd",
        "token",
        "secret",
        "key",
        "sig",
        "auth",
        "credential",
        "session",
    ];
    let lower = name.to_ascii_lowercase();
    SECRET_WORDS.iter().any(|w| lower.contains(w))
}

/// `name=value` with the value masked when the name holds a secret.
pub fn redact_pair(pair: &str) -> String {
    match pair.split_once('=') {
        Some((name, value)) if !value.is_empty() && names_a_secret(name) => format!("{name}=***"),
        _ => pair.to_owned(),
    }
}

#[cfg(test)]
mod redact_tests {
    use super::redact;

    #[test]
    fn passwords_are_masked_wherever_the_url_holds_them() {
        assert_eq!(
            redact("postgres://baton:s3cret@db/baton"),
            "postgres://baton:***@db/baton"
        );
        assert_eq!(
            redact("postgres://baton@db/b?sslmode=require&password=s3cret"),
            "postgres://baton@db/b?sslmode=require&password=***"
        );
        assert_eq!(
            redact("http://hook:pw@example.com/x?token=t"),
            "http://hook:***@example.com/x?token=***"
        );
        assert_eq!(
            redact("sqlite://./data/baton.db"),
            "sqlite://./data/baton.db"
        );
    }

    #[test]
    fn a_token_as_user_name_or_in_the_query_is_masked() {
        assert_eq!(
            redact("https://ghp_abc123@hooks.example/x"),
            "https://***@hooks.example/x"
        );
        assert_eq!(
            redact("https://api.example/v1?page=2&access_token=abc&X-Amz-Signature=f00#id_token=j"),
            "https://api.example/v1?page=2&access_token=***&X-Amz-Signature=***#id_token=***"
        );
        // A database role is a name, not a secret.
        assert_eq!(
            redact("postgres://baton@db/baton"),
            "postgres://baton@db/baton"
        );
    }

    /// An `@` after the host (a redirect's query, a path) is no
    /// credential: the host stays in view.
    #[test]
    fn an_at_sign_past_the_host_hides_nothing() {
        for url in [
            "http://real.example/r?next=a@evil.example",
            "http://real.example/r?next=a:b@evil.example",
            "http://real.example/users/a@b:c",
            "http://real.example#a:b@c",
        ] {
            assert_eq!(redact(url), url);
        }
        assert_eq!(
            redact("http://u:p@real.example/r?to=a:b@evil.example"),
            "http://u:***@real.example/r?to=a:b@evil.example"
        );
    }
}

#[cfg(test)]
mod migration_numbers {
    /// The first migration numbered alike on both backends. Before it the
    /// numbers drifted apart (SQLite had no steps for PostgreSQL-only
    /// storage settings), so the same step had two numbers; from it on, a
    /// step has one number, and a backend that needs nothing for it simply
    /// has no file of that number.
    const ALIKE_FROM: i64 = 21;

    fn steps(migrator: &sqlx::migrate::Migrator) -> Vec<(i64, String)> {
        migrator
            .iter()
            .filter(|m| m.version >= ALIKE_FROM)
            .map(|m| (m.version, m.description.to_string()))
            .collect()
    }

    #[test]
    fn both_backends_number_a_step_alike() {
        let postgres = steps(&super::postgres::MIGRATOR);
        let sqlite = steps(&super::sqlite::MIGRATOR);
        assert!(!postgres.is_empty());
        // Every number either backend uses names the same step in the
        // other, where the other has it.
        for (version, description) in postgres.iter().chain(&sqlite) {
            for other in [&postgres, &sqlite] {
                if let Some((_, there)) = other.iter().find(|(v, _)| v == version) {
                    assert_eq!(there, description, "migration {version} differs");
                }
            }
        }
        // A step on both backends has the same number on both.
        for (version, description) in &postgres {
            if let Some((v, _)) = sqlite.iter().find(|(_, d)| d == description) {
                assert_eq!(v, version, "{description} is numbered differently");
            }
        }
    }
}
