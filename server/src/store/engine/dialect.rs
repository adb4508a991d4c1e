//! The seam between the store's rules ([`super`]) and one database: how a
//! transaction begins and ends, how a statement runs with its arguments,
//! and the few statements whose SQL cannot be the same on PostgreSQL and
//! SQLite (lists as arrays or as JSON, data-modifying CTEs, row locks,
//! planner settings).
//!
//! Everything else — which status an action needs, what its refusal says,
//! what follows a finish — is written once in the engine over this trait.
//! sqlx cannot be generic over two databases without a bound for every
//! type that crosses it, so arguments cross as [`Arg`] and rows as any
//! type both drivers can decode ([`StoreRow`]).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use sqlx::error::BoxDynError;
use sqlx::migrate::Migrator;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{Arguments, Database, Encode, FromRow, Type};

use super::Shared;
use super::audit::Asked;
use super::liveness::SweepCandidate;
use crate::plan::NewPlan;
use crate::secret::Secret;
use crate::store::engine::gates::ROUND_CONTEXT;
use crate::store::engine::notifications::NotifyTargets;
use crate::store::engine::reads::rows::{ClaimRow, FinishedRow};
use crate::store::engine::{Admit, Made};
use crate::store::signals::{Signal, Signals};
use crate::store::{Actor, Backend, Beaten, Claim, Finish, LogLine, Result, StoreError};
use domain::gates::{ContextRow, Decisions, PendingRun};
use domain::time::Ts;

/// A statement's text. Every `Sql` is a constant or assembled from
/// constants; values always travel as [`Arg`]s.
#[derive(Debug, Clone)]
pub struct Sql {
    text: Cow<'static, str>,
    /// Kept as a prepared statement on the connection (sqlx's default).
    persistent: bool,
}

impl Sql {
    /// Text assembled from constants (a lock clause appended, a filter
    /// chosen from an enum); never from input.
    pub fn built(text: String) -> Sql {
        Sql {
            text: Cow::Owned(text),
            persistent: true,
        }
    }

    /// Not kept as a prepared statement: planned for its actual arguments
    /// on every run.
    pub fn unprepared(self) -> Sql {
        Sql {
            persistent: false,
            ..self
        }
    }

    /// The text for sqlx, and whether to keep it prepared.
    pub fn into_parts(self) -> (sqlx::AssertSqlSafe<Cow<'static, str>>, bool) {
        (sqlx::AssertSqlSafe(self.text), self.persistent)
    }
}

impl From<&'static str> for Sql {
    fn from(text: &'static str) -> Sql {
        Sql {
            text: Cow::Borrowed(text),
            persistent: true,
        }
    }
}

/// One statement argument.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    Int(Option<i64>),
    Text(Option<&'a str>),
    Time(Option<Ts>),
}

impl From<i64> for Arg<'_> {
    fn from(v: i64) -> Self {
        Arg::Int(Some(v))
    }
}

impl From<Option<i64>> for Arg<'_> {
    fn from(v: Option<i64>) -> Self {
        Arg::Int(v)
    }
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(v: &'a str) -> Self {
        Arg::Text(Some(v))
    }
}

impl<'a> From<&'a String> for Arg<'a> {
    fn from(v: &'a String) -> Self {
        Arg::Text(Some(v))
    }
}

impl<'a> From<Option<&'a str>> for Arg<'a> {
    fn from(v: Option<&'a str>) -> Self {
        Arg::Text(v)
    }
}

impl<'a> From<&'a Option<String>> for Arg<'a> {
    fn from(v: &'a Option<String>) -> Self {
        Arg::Text(v.as_deref())
    }
}

impl<'a> From<&'a Option<Secret>> for Arg<'a> {
    fn from(v: &'a Option<Secret>) -> Self {
        Arg::Text(v.as_ref().map(Secret::expose))
    }
}

impl From<Ts> for Arg<'_> {
    fn from(v: Ts) -> Self {
        Arg::Time(Some(v))
    }
}

impl From<Option<Ts>> for Arg<'_> {
    fn from(v: Option<Ts>) -> Self {
        Arg::Time(v)
    }
}

/// The arguments of one statement as the driver `DB` takes them.
pub fn arguments<'a, DB>(args: &[Arg<'a>]) -> Result<DB::Arguments>
where
    DB: Database,
    Option<i64>: Encode<'a, DB> + Type<DB>,
    Option<&'a str>: Encode<'a, DB> + Type<DB>,
    Option<Ts>: Encode<'a, DB> + Type<DB>,
{
    let mut out = DB::Arguments::default();
    for arg in args {
        let added: Result<(), BoxDynError> = match *arg {
            Arg::Int(v) => out.add(v),
            Arg::Text(v) => out.add(v),
            Arg::Time(v) => out.add(v),
        };
        added.map_err(sqlx::Error::Encode)?;
    }
    Ok(out)
}

/// A row both drivers can decode (every `#[derive(sqlx::FromRow)]` struct
/// of the store, and tuples such as `(i64,)`).
pub trait StoreRow:
    for<'r> FromRow<'r, PgRow> + for<'r> FromRow<'r, SqliteRow> + Send + Unpin
{
}

impl<T> StoreRow for T where
    T: for<'r> FromRow<'r, PgRow> + for<'r> FromRow<'r, SqliteRow> + Send + Unpin
{
}

/// Row locks a statement takes where the database has them (PostgreSQL);
/// SQLite's write lock already serialises every write transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowLock {
    /// The task rows `t` an action reads, so two actions on one task
    /// serialise.
    Tasks,
    /// RUNNING runs the sweeper is about to fail; rows another
    /// transaction holds are left for the next sweep.
    SweptRuns,
    /// Deliveries a replica takes to send; another replica's are skipped.
    TakenDeliveries,
    /// One schedule an operator changes, so a round cannot fire it
    /// half-changed.
    Schedules,
    /// Due schedules a round fires; rows another round holds are left to
    /// it (it makes their ticks).
    DueSchedules,
}

/// What one database must provide for the engine.
#[async_trait::async_trait]
pub trait Dialect: Send + Sync + Sized + 'static {
    /// A write transaction (on SQLite, with this process's writer slot).
    type Tx: Send;

    const BACKEND: Backend;

    /// The statement that reads the database server's clock; `None` where
    /// the database has none of its own (SQLite, a file on this host).
    const CLOCK: Option<&'static str>;

    /// Whether replicas of different builds may write to the database at
    /// once: PostgreSQL's in a rolling upgrade; never SQLite's, which one
    /// process owns (`store::sqlite::serve_lock`).
    const MIXED_BUILDS: bool;

    /// The state every store keeps beside its connections.
    fn shared(&self) -> &Shared;

    /// Wake-ups raised by this store's commits.
    fn signals(&self) -> &Arc<Signals> {
        self.shared().signals()
    }

    /// Where notifications go, as last set.
    fn notify_targets(&self) -> NotifyTargets {
        self.shared().targets()
    }

    /// Forwards other processes' announcements to [`Dialect::signals`]
    /// until the connection fails; never returns where there are none.
    async fn listen(&self) -> Result<()>;

    /// The migrations of this backend.
    fn migrator(&self) -> &'static Migrator;

    /// Applies pending migrations (idempotent).
    async fn migrate(&self) -> Result<()>;

    async fn begin(&self) -> Result<Self::Tx>;

    /// A transaction for a liveness write (the leader lease): on
    /// connections kept for those where the backend has them, so that
    /// requests waiting on a lock for every other connection cannot keep
    /// it from the database (docs/design.md, "Liveness").
    async fn begin_liveness(&self) -> Result<Self::Tx> {
        self.begin().await
    }

    async fn commit(tx: Self::Tx) -> Result<()>;

    /// Runs a statement in `tx`; how many rows it changed.
    async fn execute(tx: &mut Self::Tx, sql: Sql, args: &[Arg<'_>]) -> Result<u64>;

    /// Runs a query in `tx`.
    async fn fetch_all<R: StoreRow>(
        tx: &mut Self::Tx,
        sql: Sql,
        args: &[Arg<'_>],
    ) -> Result<Vec<R>>;

    /// Runs a read outside any transaction.
    async fn read<R: StoreRow>(&self, sql: Sql, args: &[Arg<'_>]) -> Result<Vec<R>>;

    /// Runs one writing statement in a transaction of its own; how many
    /// rows it changed.
    async fn write(&self, sql: Sql, args: &[Arg<'_>]) -> Result<u64>;

    /// [`Dialect::write`] for a statement that returns rows.
    async fn write_returning<R: StoreRow>(&self, sql: Sql, args: &[Arg<'_>]) -> Result<Vec<R>>;

    /// [`Dialect::write_returning`] for a replica heartbeat: a lock held
    /// elsewhere is waited for briefly, then reported
    /// ([`StoreError::is_lock_wait`]) rather than waited out.
    async fn heartbeat_write<R: StoreRow>(&self, sql: Sql, args: &[Arg<'_>]) -> Result<Vec<R>> {
        self.write_returning(sql, args).await
    }

    /// Records a replica heartbeat that [`Dialect::heartbeat_write`] found
    /// held up beside the replica's row (`held_replica_heartbeat`,
    /// docs/design.md "Liveness"), where another client may hold that row
    /// alone; nothing where the lock held is the whole database's (SQLite),
    /// which the sweeper needs as well.
    async fn held_replica_heartbeat(&self, _replica_id: &str, _now: Ts) -> Result<()> {
        Ok(())
    }

    /// The overview's per-minute count of finished runs (`$1`: the window's
    /// start); the minute of a timestamp is the backend's own SQL.
    const FINISHED_PER_MINUTE: &'static str;

    /// The clause that takes `lock` at the end of a SELECT ("" where the
    /// write lock already covers it).
    fn row_lock(lock: RowLock) -> &'static str;

    /// Tells other processes about `signal` when `tx` commits (PostgreSQL's
    /// NOTIFY); nothing on a database one process owns.
    async fn announce(tx: &mut Self::Tx, signal: Signal) -> Result<()>;

    /// Whether `e` is a deadlock the database broke by failing this
    /// transaction, so that running it again is safe.
    fn is_deadlock(e: &StoreError) -> bool;

    /// Creates the next attempt (PENDING) of each task, points the task at
    /// it and records the creation event. `run_at[i]` overrides the task's
    /// own `run_at` (automatic retries wait out their backoff). Returns the
    /// new runs' ids.
    async fn runs_create(
        tx: &mut Self::Tx,
        task_ids: &[i64],
        run_at: &[Option<Ts>],
        actor: Actor<'_>,
        detail: &str,
        now: Ts,
    ) -> Result<Vec<i64>>;

    /// Moves those of `run_ids` that are PENDING or AVAILABLE to CANCELED,
    /// each with an event naming its previous status, and marks RUNNING
    /// ones not yet asked as asked to cancel (their replica ends them).
    /// Returns how many changed.
    async fn runs_cancel(
        tx: &mut Self::Tx,
        run_ids: &[i64],
        actor: Actor<'_>,
        now: Ts,
    ) -> Result<u64>;

    /// Writes a validated plan, its tasks and (when it starts) their first
    /// runs with their creation events, PENDING or, as `admit` allows,
    /// admitted AVAILABLE ([`gates::admission`]), announcing each kind to
    /// other replicas; the plan's id and what was made.
    ///
    /// [`gates::admission`]: crate::store::engine::gates::admission
    async fn plan_write(
        tx: &mut Self::Tx,
        plan: &NewPlan,
        actor: Actor<'_>,
        admit: Admit,
        now: Ts,
    ) -> Result<(i64, Made)>;

    /// A person's submit of `plan`, written and committed as one
    /// statement with its audit entry (`asked`, `detail`), where the
    /// backend can and that saves round trips (PostgreSQL); the plan's id
    /// and what was made (admitted as [`Admit::IfClear`] allows).
    /// `None`: it does not, and the caller writes the plan with
    /// [`Dialect::plan_write`] in a transaction. Only for a plan that
    /// needs nothing written after its tasks
    /// ([`NewPlan::writes_after_tasks`]).
    async fn plan_submit_alone(
        &self,
        _plan: &NewPlan,
        _asked: &Asked<'_>,
        _detail: &str,
        _now: Ts,
    ) -> Result<Option<(i64, Made)>> {
        Ok(None)
    }

    /// A promotion round's transaction, with the round's lock if no other
    /// replica's round holds it; [`Dialect::PENDING_RUNS`] then reads the
    /// runs only where it has the lock. The transaction writes only what a
    /// round derives from the rest of the database, so the backend may
    /// commit it without waiting for the disk (PostgreSQL does).
    async fn round_begin(&self) -> Result<Self::Tx>;

    /// A round's first read ([`gates::pending_runs_sql`]): the PENDING
    /// runs, or none when [`Dialect::round_begin`] did not get the lock.
    ///
    /// [`gates::pending_runs_sql`]: crate::store::engine::gates::pending_runs_sql
    const PENDING_RUNS: &'static str;

    /// A round's PENDING runs ([`Dialect::PENDING_RUNS`]), in any order.
    async fn pending_runs(tx: &mut Self::Tx) -> Result<Vec<PendingRun>> {
        Self::fetch_all(tx, Self::PENDING_RUNS.into(), &[]).await
    }

    /// A round's first reads: its PENDING runs ([`Dialect::pending_runs`])
    /// and, when there are any, the brakes and target holders
    /// ([`gates::ROUND_CONTEXT`]). Two statements here; one where that
    /// saves a round trip (PostgreSQL).
    ///
    /// [`gates::ROUND_CONTEXT`]: crate::store::engine::gates::ROUND_CONTEXT
    /// `None` when the round did not get the lock (only where
    /// [`Dialect::round_begin`] merely tries it).
    async fn round_reads(tx: &mut Self::Tx) -> Result<Option<(Vec<PendingRun>, Vec<ContextRow>)>> {
        let pending = Self::pending_runs(tx).await?;
        if pending.is_empty() {
            return Ok(Some((pending, Vec::new())));
        }
        let context = Self::fetch_all(tx, ROUND_CONTEXT.into(), &[]).await?;
        Ok(Some((pending, context)))
    }

    /// Takes the promotion round's lock for `tx`, waiting up to `limit`
    /// for a round in flight to end, ahead of rounds that only try it (an
    /// operator's brake must not lose to promoters forever).
    async fn promoter_lock_wait(tx: &mut Self::Tx, limit: Duration) -> Result<()>;

    /// Writes a round's decisions: unpins (with their events), promotions
    /// PENDING → AVAILABLE (with theirs) and changed waiting causes, each
    /// only where the run is still PENDING, and announces
    /// [`Signal::Available`] when any was. Returns how many were promoted.
    /// Promotions only in a round's transaction ([`Dialect::round_begin`]),
    /// whose planner settings PostgreSQL's statement relies on.
    async fn round_write(tx: &mut Self::Tx, decided: &Decisions, now: Ts) -> Result<usize>;

    /// Claims, in a round's transaction and after its [`Dialect::round_write`],
    /// runs the round decided to promote (`ids`, still PENDING and not
    /// written yet) for `claim.replica_id`: each goes PENDING → RUNNING,
    /// with the promotion's event at `now` and the claim's at `started`,
    /// which also stamps its start and deadlines. Only runs still PENDING
    /// move (a cancel may have committed since the round read them). The
    /// round's commit becomes durable: a claimed run executes.
    async fn round_claim(
        tx: &mut Self::Tx,
        ids: &[i64],
        claim: &Claim<'_>,
        now: Ts,
        started: Ts,
    ) -> Result<Vec<ClaimRow>>;

    /// Claims up to `claim.limit` AVAILABLE runs for the replica, with
    /// their events, and commits. `asked` is when the claimer asked; the
    /// runs are stamped started at `asked` plus the time until the claim
    /// held its lock. Stamped at `asked`, a claim that waited for the lock
    /// while a promotion committed (up to the lock's 2 s timeout, or while
    /// its process was descheduled) read as started before that promotion.
    async fn runs_claim(&self, claim: &Claim<'_>, asked: Ts) -> Result<Vec<ClaimRow>>;

    /// Starts a transaction and moves the finished runs still RUNNING on
    /// `replica_id` to their final status, with their events; the
    /// transaction stays open for what follows.
    async fn runs_finish(
        &self,
        replica_id: &str,
        finishes: &[Finish],
        now: Ts,
    ) -> Result<(Self::Tx, Vec<FinishedRow>)>;

    /// Pushes the heartbeat deadline of the replica's runs, and commits;
    /// rows another transaction holds are skipped, not waited for.
    async fn runs_heartbeat(
        &self,
        replica_id: &str,
        beats: &[(i64, Duration)],
        now: Ts,
    ) -> Result<Beaten>;

    /// Appends log lines to a run the replica still owns; false when it
    /// does not, and then nothing is written.
    async fn log_append(&self, replica_id: &str, run_id: i64, lines: &[LogLine]) -> Result<bool>;

    /// The sweeper's transaction, set up for its reads, holding the
    /// table locks a heartbeat's write needs: whatever keeps heartbeats
    /// from being written keeps the sweeper from judging them.
    async fn sweep_begin(&self) -> Result<Self::Tx>;

    /// RUNNING runs the sweeper must fail ([`liveness::sweep_candidates_sql`]):
    /// on PostgreSQL a replica counts as stale only once the sweeper holds
    /// its row, so a row an outside client holds (and its heartbeat waits
    /// for) is judged by nobody.
    ///
    /// [`liveness::sweep_candidates_sql`]: super::liveness
    const SWEEP_CANDIDATES: &'static str;

    /// Fails the `found` runs still RUNNING on the replica they were seen
    /// on, each with its cause as error and event detail.
    async fn runs_fail(
        tx: &mut Self::Tx,
        found: &[SweepCandidate],
        causes: &[String],
        now: Ts,
    ) -> Result<Vec<FinishedRow>>;

    /// Deletes the rows of the claim log (PostgreSQL's) none of whose runs
    /// is RUNNING any more: they only cost the reads of RUNNING runs
    /// lookups. Nothing where RUNNING runs are found by index (SQLite).
    async fn claim_log_compact(_tx: &mut Self::Tx) -> Result<u64> {
        Ok(0)
    }

    /// Records runs an engine statement ended at `at` in the finish log
    /// (PostgreSQL's, docs/design.md, "Run storage"). The backends' own
    /// finishing statements log their runs themselves; where finished runs
    /// are found by an index of `task_run` (SQLite) there is nothing to do.
    async fn finishes_logged(_tx: &mut Self::Tx, _at: Ts, _ended: &[FinishedRow]) -> Result<()> {
        Ok(())
    }

    /// Takes runs about to be deleted out of the finish log, so that the
    /// overview counts only runs that are kept.
    async fn finishes_forgotten(_tx: &mut Self::Tx, _run_ids: &[i64]) -> Result<()> {
        Ok(())
    }

    /// Moves the replica's RUNNING runs among `run_ids` back to AVAILABLE,
    /// same attempt, with their events; the ids moved.
    async fn runs_hand_back(
        tx: &mut Self::Tx,
        replica_id: &str,
        run_ids: &[i64],
        detail: &str,
        now: Ts,
    ) -> Result<Vec<i64>>;
}
