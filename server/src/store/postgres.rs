//! The PostgreSQL store: the high-availability deployment, where several
//! replicas share one database.
//!
//! Lists travel as arrays (`= ANY($1)`, `UNNEST`), transaction-scoped
//! advisory locks let one replica promote and one claim at a time, and
//! status changes write their events in the same statement through
//! data-modifying CTEs, so a batch costs one round trip.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use app::model::{DeliveryView, EventView, PlanList, PlanStatus, PlanView, RunView};
use sqlx::postgres::{PgListener, PgPool, PgPoolOptions};
use sqlx::{Postgres, Transaction};

use super::dashboard::{self, OverviewStats};
use super::gates::{self, NodeLabels};
use super::liveness::{self, Lease, SweepCandidate, SweepReport};
use super::notify::{self, DeliveryOutcome, DueDelivery, NotifyTargets, PlanOutcomes};
use super::rows::{self, ClaimRow, FinishedRow, PlanTasks, millis};
use super::sessions::{self, Session};
use super::signals::{CHANNEL, Signal, Signals};
use super::submission::{self, IdempotencyKey, Submitted};
use super::{
    Actor, Backend, Claim, ClaimedRun, Finish, FinishReport, LogLine, PromoteReport, ReplicaInfo,
    ReplicaRecord, Result, SCHEDULER, Store, StoreError, Ts,
};
use crate::plan::NewPlan;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

/// Key of the advisory lock that serialises promotion rounds ("baton:p").
const PROMOTER_LOCK: i64 = 0x0062_6174_6f6e_3a70;

/// Key of the advisory lock that serialises claims ("baton:c"), as a
/// literal so `concat!` can splice it into [`CLAIM_LOCK`].
macro_rules! claim_lock_key {
    () => {
        "27691700431239779"
    };
}

/// How long a claimer waits for the claim lock before it goes around it
/// ([`CLAIM`]): far longer than any claim holds it (milliseconds), short
/// enough that a frozen holder costs seconds, not the cluster's progress.
macro_rules! claim_lock_timeout {
    () => {
        "2s"
    };
}

/// The claim statement ([`CLAIM`], [`CLAIM_AROUND`]); `$row_locks` follows
/// the ordered pick of ids.
macro_rules! claim_sql {
    ($row_locks:literal) => {
        concat!(
            "WITH claimed AS (
        UPDATE task_run r SET status = 'RUNNING', replica_id = $1, started_at = $4,
            last_heartbeat_at = $4,
            deadline = $4 + r.timeout_ms * INTERVAL '1 millisecond',
            heartbeat_deadline = $4 + ",
            rows::heartbeat_timeout_sql!(),
            " * INTERVAL '1 millisecond'
        FROM task t
        WHERE r.id = ANY(ARRAY(
                SELECT id FROM task_run
                WHERE status = 'AVAILABLE' AND (node IS NULL OR node = ANY($2))
                ORDER BY id LIMIT $3",
            $row_locks,
            "))
            AND r.status = 'AVAILABLE' AND t.id = r.task_id
        RETURNING r.id, r.task_id, r.plan_id, r.attempt, r.started_at, r.deadline,
            t.executor, t.heartbeat_interval_ms, ",
            rows::heartbeat_timeout_sql!(),
            " AS heartbeat_timeout_ms),
    logged AS (
        INSERT INTO run_event (run_id, from_status, to_status, replica_id, actor, at)
        SELECT id, 'AVAILABLE', 'RUNNING', $1, $1, $4 FROM claimed)
    SELECT * FROM claimed ORDER BY id"
        )
    };
}

/// Connections per replica: the loops, the API and a few spares.
const DEFAULT_POOL_SIZE: u32 = 12;

/// The settings of [`PgStore::index_only`] and [`PgStore::hash_joined`],
/// as literals so `BEGIN` can carry them.
macro_rules! index_only_sql {
    () => {
        "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off"
    };
}
macro_rules! hash_joined_sql {
    () => {
        concat!(index_only_sql!(), "; SET LOCAL enable_nestloop = off")
    };
}

const BEGIN_INDEX_ONLY: &str = concat!("BEGIN; ", index_only_sql!());
const BEGIN_HASH_JOINED: &str = concat!("BEGIN; ", hash_joined_sql!());

/// A hot statement and the `BEGIN` of its transaction, which sets the
/// planner up for it ([`PgStore::index_only`] or [`PgStore::hash_joined`]).
/// Kept together so the store and `plan_tests` run the same pair.
struct Planned {
    begin: &'static str,
    sql: &'static str,
}

/// Who: every replica's claimer, whenever it has free worker slots. The task
/// row is read once per run: for its heartbeat timeout and for the executor
/// the worker needs.
///
/// The picked ids reach the UPDATE as one array (an InitPlan), not as a
/// joined CTE. Joined, stale statistics (the last ANALYZE saw no AVAILABLE
/// run) let the planner put the whole AVAILABLE index on the outside of a
/// nested loop and rescan the CTE for every run in it: quadratic, 0.5 s per
/// claim of 512 out of 5,000 AVAILABLE runs, and the reason the bench fell
/// to 2,000 runs/s after its latency phase. As an array the ids can only be
/// looked up; `plan_tests` pins that down.
///
/// Claims are serialised across replicas by an advisory lock
/// ([`CLAIM_LOCK`]) instead of `FOR UPDATE SKIP LOCKED`. Under SKIP LOCKED each claim
/// locked every row it took before updating it (one more WAL record and
/// dirtied page per run), and all replicas woke to the same NOTIFY: the
/// losers walked past every row the winner had locked and mostly came away
/// empty. Serialised, the next claimer starts after the previous one
/// committed and finds only what is still AVAILABLE. The UPDATE's own
/// `status = 'AVAILABLE'` re-check stays the arbiter against a cancel that
/// commits in between. In one sitting's 8 alternating pairs of the
/// PostgreSQL bench (4 replicas), serialised claims won all 8, by a median
/// of 6 % end to end, with the submit → RUNNING latency no worse.
///
/// A replica frozen inside its claim (a VM pause, SIGSTOP) would hold the
/// lock until it thaws or its connection dies, and stop every replica's
/// claims with it. So the wait is bounded (`claim_lock_timeout!`); past it
/// a claimer takes [`CLAIM_AROUND`], which goes around the frozen claim's
/// rows with SKIP LOCKED.
const CLAIM: Planned = Planned {
    begin: BEGIN_INDEX_ONLY,
    sql: claim_sql!(""),
};

/// Takes the claim lock in [`CLAIM`]'s transaction, waiting at most
/// `claim_lock_timeout!`. Not part of that `BEGIN`: a `BEGIN` string that
/// fails midway leaves its connection in an aborted transaction that sqlx
/// does not roll back.
const CLAIM_LOCK: &str = concat!(
    "SET LOCAL lock_timeout = '",
    claim_lock_timeout!(),
    "'; SELECT pg_advisory_xact_lock(",
    claim_lock_key!(),
    "); SET LOCAL lock_timeout = 0"
);

/// [`CLAIM`] without the claim lock, for when its holder does not let go:
/// rows are locked and skipped as other claimers hold them. The lock
/// holder's plain UPDATE waits for these row locks, then re-checks the
/// status, so the two kinds of claim never take the same run.
const CLAIM_AROUND: Planned = Planned {
    begin: BEGIN_INDEX_ONLY,
    sql: claim_sql!(" FOR UPDATE SKIP LOCKED"),
};

/// Who: the replica that executed the runs, in batches. Fenced: only runs
/// still RUNNING and owned by this replica change. Hash-joined: the batch
/// is an `UNNEST`; `r.id = ANY($2)` lets the planner read just the batch
/// by key, rather than every RUNNING run, when its statistics show that is
/// cheaper.
const FINISH: Planned = Planned {
    begin: BEGIN_HASH_JOINED,
    sql: "WITH f AS (
        SELECT * FROM UNNEST($2::bigint[], $3::text[], $4::bigint[], $5::text[])
            AS f(id, status, code, error)),
    done AS (
        UPDATE task_run r SET status = f.status, finished_at = $6, result_code = f.code,
            error = f.error
        FROM f WHERE r.id = f.id AND r.id = ANY($2) AND r.status = 'RUNNING'
            AND r.replica_id = $1
        RETURNING r.id, r.plan_id, r.status, r.task_id, r.attempt, r.max_attempts, r.error),
    logged AS (
        INSERT INTO run_event (run_id, from_status, to_status, replica_id, actor, at, detail)
        SELECT id, 'RUNNING', status, $1, $1, $6, error FROM done)
    SELECT id, plan_id, status, task_id, attempt, max_attempts FROM done",
};

/// Who: each replica's run heartbeat, one statement for all its runs.
/// Hash-joined, like [`FINISH`].
const RUN_HEARTBEAT: Planned = Planned {
    begin: BEGIN_HASH_JOINED,
    sql: "UPDATE task_run r SET last_heartbeat_at = $4,
        heartbeat_deadline = $4 + b.timeout_ms * INTERVAL '1 millisecond'
    FROM UNNEST($2::bigint[], $3::bigint[]) AS b(id, timeout_ms)
    WHERE r.id = b.id AND r.id = ANY($2) AND r.status = 'RUNNING' AND r.replica_id = $1
    RETURNING r.id",
};

/// Who: plan submit. The plan, its tasks and (when it starts now) each
/// task's first run with its creation event, in one statement: the runs
/// are copied from the task rows as they are inserted, not looked up
/// again. A task is written once, pointing (`latest_run_id`) at the id
/// reserved for its run.
const PLAN_SUBMIT: &str = "WITH p AS (
        INSERT INTO plan (name, description, parallel_limit, created_at, created_by, webhooks,
            open_tasks)
        VALUES ($1, $2, $3, $4, $5, $6, cardinality($7::text[])) RETURNING id),
    t AS (
        INSERT INTO task (plan_id, name, target, exclusive, version, run_at, node, timeout_ms,
            max_attempts, heartbeat_interval_ms, heartbeat_timeout_ms, executor,
            reassign_after_ms, latest_run_id)
        SELECT p.id, x.name, x.target, x.exclusive, x.version, x.run_at, x.node, x.timeout_ms,
            x.max_attempts, x.hbi, x.hbt, x.executor, x.reassign,
            CASE WHEN $19 THEN nextval('task_run_id_seq') END
        FROM p, UNNEST($7::text[], $8::text[], $9::bool[], $10::text[], $11::timestamptz[],
            $12::text[], $13::bigint[], $14::bigint[], $15::bigint[], $16::bigint[], $17::text[],
            $18::bigint[])
            WITH ORDINALITY AS x(name, target, exclusive, version, run_at, node, timeout_ms,
                max_attempts, hbi, hbt, executor, reassign, ord)
        ORDER BY x.ord
        RETURNING id, plan_id, target, exclusive, version, run_at, node, timeout_ms,
            max_attempts, reassign_after_ms, latest_run_id),
    made AS (
        INSERT INTO task_run (id, task_id, plan_id, attempt, status, target, exclusive, version,
            node, timeout_ms, max_attempts, run_at, created_at, waiting_cause, reassign_after_ms)
        SELECT latest_run_id, id, plan_id, 1, 'PENDING', target, exclusive, version, node,
            timeout_ms, max_attempts, run_at, $4, $20, reassign_after_ms
        FROM t WHERE $19
        RETURNING id),
    logged AS (
        INSERT INTO run_event (run_id, from_status, to_status, actor, at, detail)
        SELECT id, NULL, 'PENDING', $5, $4, 'submitted' FROM made)
    SELECT id FROM p";

/// PostgreSQL's `lock_not_available`: a `lock_timeout` ran out.
fn is_lock_timeout(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("55P03"))
}

pub struct PgStore {
    pool: PgPool,
    signals: Arc<Signals>,
    targets: RwLock<NotifyTargets>,
}

impl PgStore {
    pub async fn connect(url: &str) -> Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(DEFAULT_POOL_SIZE)
            .acquire_timeout(Duration::from_secs(10))
            .connect(url)
            .await?;
        Ok(PgStore {
            pool,
            signals: Arc::default(),
            targets: RwLock::default(),
        })
    }

    fn targets(&self) -> NotifyTargets {
        self.targets.read().expect("poisoned").clone()
    }

    /// Keeps the rest of `tx` on its indexes.
    ///
    /// task_run's status mix changes far faster than autovacuum refreshes
    /// its statistics: after a burst the planner may believe the table holds
    /// a few hundred rows, or that nothing is AVAILABLE, and pick a
    /// sequential or bitmap scan that reads (and sorts) every run — seen
    /// here as claims taking seconds. The claim, finish and promotion
    /// statements each have one right plan (a live-status partial index or
    /// the primary key), so for them those scans are ruled out. Broader
    /// queries (plan lists, replica counts) keep the planner's choice.
    ///
    /// This cannot fix a join order: a batch joined to `task_run` as a CTE
    /// may still be rescanned once per row of a partial index the planner
    /// thinks is empty. Batches of ids therefore reach `task_run` as arrays
    /// (`= ANY(…)`), as the claim does ([`CLAIM`]).
    async fn index_only(tx: &mut Transaction<'_, Postgres>) -> Result<()> {
        sqlx::raw_sql(index_only_sql!()).execute(&mut **tx).await?;
        Ok(())
    }

    /// A transaction whose `BEGIN` also sets the planner up
    /// ([`BEGIN_INDEX_ONLY`], [`BEGIN_HASH_JOINED`]): one round trip, not
    /// two.
    async fn begin(&self, begin: &'static str) -> Result<Transaction<'static, Postgres>> {
        Ok(self.pool.begin_with(begin).await?)
    }

    /// [`Self::index_only`], and no nested loops either, for the next
    /// statements of `tx`.
    ///
    /// A batch that reaches `task_run` as a joined `UNNEST` (each run with
    /// its own values: a finish's outcome, a heartbeat's timeout, a waiting
    /// cause) must be joined by hashing. Under stale statistics the planner
    /// believes the live-status index is all but empty, puts it on the
    /// outside of a nested loop and rescans the whole batch for every run
    /// in it: the bench's finishes compared 144,102 pairs to store 282
    /// runs. A hash join reads each side once, whatever the estimates.
    /// Callers call [`Self::nested_loops_back`] after that statement when
    /// more follow: their joins look rows up by key, which only a nested
    /// loop does well.
    async fn hash_joined(tx: &mut Transaction<'_, Postgres>) -> Result<()> {
        sqlx::raw_sql(hash_joined_sql!()).execute(&mut **tx).await?;
        Ok(())
    }

    async fn nested_loops_back(tx: &mut Transaction<'_, Postgres>) -> Result<()> {
        sqlx::raw_sql("SET LOCAL enable_nestloop = on")
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Queues a NOTIFY, delivered to every listener when `tx` commits.
    async fn notify(tx: &mut Transaction<'_, Postgres>, signal: Signal) -> Result<()> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(CHANNEL)
            .bind(signal.payload())
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Queues a `deliveries` NOTIFY when `notified` queued any webhook
    /// delivery, and says whether it did (the caller raises the local
    /// signal after commit).
    async fn notify_deliveries(
        tx: &mut Transaction<'_, Postgres>,
        notified: &[notify::Notified],
    ) -> Result<bool> {
        let queued = notify::any_queued(notified);
        if queued {
            Self::notify(tx, Signal::Deliveries).await?;
        }
        Ok(queued)
    }

    /// Keeps new PENDING runs from slipping in under a promotion round that
    /// already read the PENDING set, where the version gate would miss
    /// them: their creators share the lock that a round takes exclusively
    /// (until commit). Only a versioned run can hold another back, so a
    /// submit without versions skips it ([`Store::plan_insert`]); starts
    /// and retries, rare and not worth a look at their tasks, always take
    /// it.
    async fn creation_lock(tx: &mut Transaction<'_, Postgres>) -> Result<()> {
        sqlx::query("SELECT pg_advisory_xact_lock_shared($1)")
            .bind(PROMOTER_LOCK)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Creates the next attempt (PENDING) of each task, points the task at
    /// it and records the creation event. `run_at[i]` overrides the task's
    /// own `run_at` (automatic retries wait out their backoff).
    async fn runs_create(
        tx: &mut Transaction<'_, Postgres>,
        task_ids: &[i64],
        run_at: &[Option<Ts>],
        actor: Actor<'_>,
        detail: &str,
        now: Ts,
    ) -> Result<Vec<i64>> {
        if task_ids.is_empty() {
            return Ok(Vec::new());
        }
        Self::creation_lock(tx).await?;
        // Who: plan start, retries (operator and automatic). A submit that
        // starts at once creates its runs in PLAN_SUBMIT.
        let created: Vec<i64> = sqlx::query_scalar(
            "WITH made AS (
                INSERT INTO task_run (task_id, plan_id, attempt, status, target, exclusive,
                    version, node, timeout_ms, max_attempts, run_at, created_at, waiting_cause,
                    reassign_after_ms)
                SELECT t.id, t.plan_id, COALESCE(prev.attempt, 0) + 1, 'PENDING', t.target,
                    t.exclusive, t.version, t.node, t.timeout_ms, t.max_attempts,
                    COALESCE(x.run_at, t.run_at), $3, $4, t.reassign_after_ms
                FROM UNNEST($1::bigint[], $2::timestamptz[]) AS x(task_id, run_at)
                JOIN task t ON t.id = x.task_id
                LEFT JOIN task_run prev ON prev.id = t.latest_run_id
                RETURNING id, task_id),
            linked AS (
                UPDATE task SET latest_run_id = made.id FROM made WHERE task.id = made.task_id)
            INSERT INTO run_event (run_id, from_status, to_status, actor, at, detail)
            SELECT id, NULL, 'PENDING', $5, $3, $6 FROM made
            RETURNING run_id",
        )
        .bind(task_ids)
        .bind(run_at)
        .bind(now)
        .bind(gates::CAUSE_NEW)
        .bind(actor)
        .bind(detail)
        .fetch_all(&mut **tx)
        .await?;
        Self::notify(tx, Signal::Changed).await?;
        Ok(created)
    }

    /// Moves the given live runs to CANCELED, recording each one's previous
    /// status. Returns how many moved.
    async fn runs_cancel(
        tx: &mut Transaction<'_, Postgres>,
        run_ids: &[i64],
        actor: Actor<'_>,
        now: Ts,
    ) -> Result<u64> {
        // Who: operator cancel of a task or a plan. A RUNNING run's replica
        // notices through its fence (heartbeat or the NOTIFY below).
        let moved = sqlx::query(
            "WITH old AS (
                SELECT id, status FROM task_run
                WHERE id = ANY($1) AND status IN ('PENDING', 'AVAILABLE', 'RUNNING')
                ORDER BY id FOR UPDATE),
            moved AS (
                UPDATE task_run r SET status = 'CANCELED', finished_at = $2, waiting_cause = NULL,
                    error = 'canceled by ' || $3
                FROM old WHERE r.id = old.id
                RETURNING r.id, old.status AS from_status, r.replica_id)
            INSERT INTO run_event (run_id, from_status, to_status, replica_id, actor, at, detail)
            SELECT id, from_status, 'CANCELED', replica_id, $3, $2, 'canceled by ' || $3 FROM moved",
        )
        .bind(run_ids)
        .bind(now)
        .bind(actor)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        Self::notify(tx, Signal::Canceled).await?;
        Self::notify(tx, Signal::Changed).await?;
        Ok(moved)
    }

    /// `run` and `retry` of a whole plan: a new attempt for each task in
    /// `which`, or a conflict when there is none.
    async fn plan_new_attempts(
        &self,
        id: i64,
        which: PlanTasks,
        actor: Actor<'_>,
        now: Ts,
    ) -> Result<()> {
        retrying_deadlocks(|| self.plan_new_attempts_once(id, which, actor, now)).await
    }

    async fn plan_new_attempts_once(
        &self,
        id: i64,
        which: PlanTasks,
        actor: Actor<'_>,
        now: Ts,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        Self::plan_exists(&mut tx, id).await?;
        let sql = sqlx::AssertSqlSafe(format!("{} FOR UPDATE OF t", which.select_sql()));
        let tasks: Vec<i64> = sqlx::query_scalar(sql).bind(id).fetch_all(&mut *tx).await?;
        if tasks.is_empty() {
            return Err(which.none_left(id));
        }
        let run_at = vec![None; tasks.len()];
        let detail = which.detail(actor);
        Self::runs_create(&mut tx, &tasks, &run_at, actor, &detail, now).await?;
        // A new phase: its failure or completion notifies again (seed 002).
        sqlx::query(notify::CLAIM_DELETE)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        self.signals.raise(Signal::Changed);
        Ok(())
    }

    /// Writes a plan, its tasks and (when it starts) their first runs in
    /// `tx`.
    async fn insert_plan(
        tx: &mut Transaction<'_, Postgres>,
        plan: &NewPlan,
        actor: Actor<'_>,
        now: Ts,
    ) -> Result<i64> {
        let executors = rows::executors_json(plan)?;
        let t = &plan.tasks;
        if plan.start && plan.has_versions() {
            Self::creation_lock(tx).await?;
        }
        let plan_id: i64 = sqlx::query_scalar(PLAN_SUBMIT)
            .bind(&plan.name)
            .bind(&plan.description)
            .bind(plan.parallel_limit)
            .bind(now)
            .bind(actor)
            .bind(rows::webhooks_json(plan)?)
            .bind(t.iter().map(|t| t.name.clone()).collect::<Vec<_>>())
            .bind(t.iter().map(|t| t.target.clone()).collect::<Vec<_>>())
            .bind(t.iter().map(|t| t.exclusive).collect::<Vec<_>>())
            .bind(t.iter().map(|t| t.version.clone()).collect::<Vec<_>>())
            .bind(t.iter().map(|t| t.run_at.map(Ts::from)).collect::<Vec<_>>())
            .bind(t.iter().map(|t| t.node.clone()).collect::<Vec<_>>())
            .bind(t.iter().map(|t| millis(t.timeout)).collect::<Vec<_>>())
            .bind(t.iter().map(|t| t.max_attempts).collect::<Vec<_>>())
            .bind(
                t.iter()
                    .map(|t| t.heartbeat_interval.map(millis))
                    .collect::<Vec<_>>(),
            )
            .bind(
                t.iter()
                    .map(|t| t.heartbeat_timeout.map(millis))
                    .collect::<Vec<_>>(),
            )
            .bind(executors)
            .bind(
                t.iter()
                    .map(|t| t.reassign_after.map(millis))
                    .collect::<Vec<_>>(),
            )
            .bind(plan.start)
            .bind(gates::CAUSE_NEW)
            .fetch_one(&mut **tx)
            .await?;
        if plan.start {
            Self::notify(tx, Signal::Changed).await?;
        }
        Ok(plan_id)
    }

    /// Cancels every live run of the plan in one transaction.
    async fn plan_cancel_once(&self, id: i64, actor: Actor<'_>, now: Ts) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        Self::plan_exists(&mut tx, id).await?;
        let live: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM task_run WHERE plan_id = $1 AND status IN ('PENDING', 'AVAILABLE', 'RUNNING')",
        )
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
        if Self::runs_cancel(&mut tx, &live, actor, now).await? == 0 {
            return Err(StoreError::Conflict(format!(
                "plan {id} has nothing PENDING, AVAILABLE or RUNNING to cancel"
            )));
        }
        tx.commit().await?;
        self.signals.raise(Signal::Canceled);
        self.signals.raise(Signal::Changed);
        Ok(())
    }

    /// No row lock: nothing deletes plans, and a plan action holding the
    /// plan row while it locks runs would invert the order of a finish,
    /// which locks its runs and then the plan row (`notify_plans`).
    async fn plan_exists(tx: &mut Transaction<'_, Postgres>, id: i64) -> Result<()> {
        let found: Option<i64> = sqlx::query_scalar("SELECT id FROM plan WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut **tx)
            .await?;
        found
            .map(|_| ())
            .ok_or(StoreError::NotFound { what: "plan", id })
    }

    /// The task's plan and its current status, with the task row locked so
    /// two actions on one task serialise.
    async fn task_lock(
        tx: &mut Transaction<'_, Postgres>,
        id: i64,
    ) -> Result<(i64, String, Option<i64>)> {
        let sql = sqlx::AssertSqlSafe(format!("{} FOR UPDATE OF t", rows::TASK_STATE));
        sqlx::query_as(sql)
            .bind(id)
            .fetch_optional(&mut **tx)
            .await?
            .ok_or(StoreError::NotFound { what: "task", id })
    }
}

rows::shared_reads!(PgStore);
dashboard::dashboard_reads!(
    PgStore,
    "FLOOR(EXTRACT(EPOCH FROM finished_at) / 60)::BIGINT"
);
gates::round_reads!(PgStore, Postgres);
// Serialised per plan by the row lock of `notify::PLAN_PROGRESS`. A
// transaction takes plan rows last (after its runs and tasks) and in id
// order, and no transaction that holds one waits for runs or tasks, so
// these locks cannot close a cycle.
notify::notify_step!(PgStore, Postgres);

#[async_trait::async_trait]
impl Store for PgStore {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    fn signals(&self) -> &Arc<Signals> {
        &self.signals
    }

    fn notify_targets_set(&self, targets: NotifyTargets) {
        *self.targets.write().expect("poisoned") = targets;
    }

    async fn signals_forward(&self) -> Result<()> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(CHANNEL).await?;
        loop {
            let note = listener.recv().await?;
            if let Some(signal) = Signal::from_payload(note.payload()) {
                self.signals.raise(signal);
            }
        }
    }

    async fn migrate(&self) -> Result<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn ready(&self) -> Result<()> {
        let applied: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations WHERE success")
                .fetch_one(&self.pool)
                .await?;
        let known = MIGRATOR.iter().count() as i64;
        if applied < known {
            return Err(StoreError::Conflict(format!(
                "{applied} of {known} migrations applied; run `baton migrate`"
            )));
        }
        Ok(())
    }

    async fn plan_insert(&self, plan: &NewPlan, actor: Actor<'_>, now: Ts) -> Result<i64> {
        let mut tx = self.pool.begin().await?;
        let plan_id = Self::insert_plan(&mut tx, plan, actor, now).await?;
        tx.commit().await?;
        if plan.start {
            self.signals.raise(Signal::Changed);
        }
        Ok(plan_id)
    }

    async fn plan_insert_keyed(
        &self,
        plan: &NewPlan,
        actor: Actor<'_>,
        now: Ts,
        key: &IdempotencyKey<'_>,
    ) -> Result<Submitted> {
        let mut tx = self.pool.begin().await?;
        let expired = now.minus(submission::IDEMPOTENCY_WINDOW);
        sqlx::query("DELETE FROM plan_submission WHERE created_at < $1")
            .bind(expired)
            .execute(&mut *tx)
            .await?;
        // Claim the key first: a submit racing with the same key waits here
        // until this transaction ends, then finds the key taken.
        let claimed = sqlx::query(
            "INSERT INTO plan_submission (idempotency_key, body_sha256, created_at)
             VALUES ($1, $2, $3) ON CONFLICT (idempotency_key) DO NOTHING",
        )
        .bind(key.key)
        .bind(&key.body_sha256)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !claimed {
            let existing: Option<(String, Option<i64>)> = sqlx::query_as(
                "SELECT body_sha256, plan_id FROM plan_submission WHERE idempotency_key = $1",
            )
            .bind(key.key)
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(answer) = submission::decide(existing, &key.body_sha256) {
                return Ok(answer);
            }
        }
        let plan_id = Self::insert_plan(&mut tx, plan, actor, now).await?;
        sqlx::query(
            "UPDATE plan_submission SET plan_id = $2, body_sha256 = $3 WHERE idempotency_key = $1",
        )
        .bind(key.key)
        .bind(plan_id)
        .bind(&key.body_sha256)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        if plan.start {
            self.signals.raise(Signal::Changed);
        }
        Ok(Submitted::Created(plan_id))
    }

    async fn plan_get(&self, id: i64) -> Result<PlanView> {
        self.read_plan(id).await
    }

    async fn plan_list(
        &self,
        status: Option<PlanStatus>,
        name: Option<&str>,
        limit: i64,
        offset: i64,
    ) -> Result<PlanList> {
        self.read_plan_list(status, name, limit, offset).await
    }

    async fn plan_start(&self, id: i64, actor: Actor<'_>, now: Ts) -> Result<()> {
        self.plan_new_attempts(id, PlanTasks::NotStarted, actor, now)
            .await
    }

    async fn plan_retry(&self, id: i64, actor: Actor<'_>, now: Ts) -> Result<()> {
        self.plan_new_attempts(id, PlanTasks::FailedOrCanceled, actor, now)
            .await
    }

    async fn plan_cancel(&self, id: i64, actor: Actor<'_>, now: Ts) -> Result<()> {
        retrying_deadlocks(|| self.plan_cancel_once(id, actor, now)).await
    }

    async fn task_retry(&self, id: i64, actor: Actor<'_>, now: Ts) -> Result<i64> {
        let mut tx = self.pool.begin().await?;
        let (plan_id, status, _) = Self::task_lock(&mut tx, id).await?;
        if status != "FAILED" && status != "CANCELED" {
            return Err(StoreError::Conflict(format!(
                "task {id} is {status}; only FAILED or CANCELED tasks can be retried"
            )));
        }
        Self::runs_create(
            &mut tx,
            &[id],
            &[None],
            actor,
            &format!("retried by {actor}"),
            now,
        )
        .await?;
        sqlx::query(notify::CLAIM_DELETE)
            .bind(plan_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        self.signals.raise(Signal::Changed);
        Ok(plan_id)
    }

    async fn task_cancel(&self, id: i64, actor: Actor<'_>, now: Ts) -> Result<i64> {
        let mut tx = self.pool.begin().await?;
        let (plan_id, status, run) = Self::task_lock(&mut tx, id).await?;
        let live = matches!(status.as_str(), "PENDING" | "AVAILABLE" | "RUNNING");
        let (true, Some(run)) = (live, run) else {
            return Err(StoreError::Conflict(format!(
                "task {id} is {status}; only PENDING, AVAILABLE or RUNNING tasks can be canceled"
            )));
        };
        Self::runs_cancel(&mut tx, &[run], actor, now).await?;
        tx.commit().await?;
        self.signals.raise(Signal::Canceled);
        self.signals.raise(Signal::Changed);
        Ok(plan_id)
    }

    async fn task_skip(&self, id: i64, actor: Actor<'_>, now: Ts) -> Result<i64> {
        let mut tx = self.pool.begin().await?;
        let (plan_id, status, _) = Self::task_lock(&mut tx, id).await?;
        if !matches!(status.as_str(), "NOT_STARTED" | "FAILED" | "CANCELED") {
            return Err(StoreError::Conflict(format!(
                "task {id} is {status}; only NOT_STARTED, FAILED or CANCELED tasks can be skipped"
            )));
        }
        sqlx::query(rows::TASK_SKIP)
            .bind(id)
            .bind(now)
            .bind(actor)
            .execute(&mut *tx)
            .await?;
        let outcomes = PlanOutcomes {
            progressed: vec![plan_id],
            ..Default::default()
        };
        let notified = Self::notify_plans(&mut tx, &self.targets(), outcomes, now).await?;
        let queued = Self::notify_deliveries(&mut tx, &notified).await?;
        tx.commit().await?;
        if queued {
            self.signals.raise(Signal::Deliveries);
        }
        Ok(plan_id)
    }

    async fn run_promote_round(&self, nodes: &NodeLabels, now: Ts) -> Result<PromoteReport> {
        let mut tx = self.pool.begin().await?;
        // One promoter at a time across replicas; the others skip their
        // round (the holder hears the same wake-ups and runs another).
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
            .bind(PROMOTER_LOCK)
            .fetch_one(&mut *tx)
            .await?;
        if !locked {
            return Ok(PromoteReport {
                skipped: true,
                ..Default::default()
            });
        }
        let Some((pending, holders)) = Self::round_read(&mut tx).await? else {
            return Ok(PromoteReport::default());
        };
        let decided = gates::evaluate(&pending, &holders, nodes, now);
        if !decided.unpin.is_empty() || !decided.causes.is_empty() {
            // Unpins and waiting causes join arrays to task_run.
            Self::hash_joined(&mut tx).await?;
        } else if !decided.promote.is_empty() {
            Self::index_only(&mut tx).await?;
        }
        if !decided.unpin.is_empty() {
            let (ids, details): (Vec<i64>, Vec<String>) = decided.unpin.iter().cloned().unzip();
            sqlx::query(
                "WITH unpinned AS (
                    UPDATE task_run r SET node = NULL FROM UNNEST($1::bigint[], $2::text[]) AS u(id, detail)
                    WHERE r.id = u.id AND r.status = 'PENDING' RETURNING r.id, u.detail)
                INSERT INTO run_event (run_id, from_status, to_status, actor, at, detail)
                SELECT id, 'PENDING', 'PENDING', $3, $4, detail FROM unpinned",
            )
            .bind(ids)
            .bind(details)
            .bind(SCHEDULER)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        let promoted = if decided.promote.is_empty() {
            0
        } else {
            let n = sqlx::query(
                "WITH moved AS (
                    UPDATE task_run SET status = 'AVAILABLE', waiting_cause = NULL
                    WHERE id = ANY($1) AND status = 'PENDING' RETURNING id)
                INSERT INTO run_event (run_id, from_status, to_status, actor, at)
                SELECT id, 'PENDING', 'AVAILABLE', $2, $3 FROM moved",
            )
            .bind(&decided.promote)
            .bind(SCHEDULER)
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            Self::notify(&mut tx, Signal::Available).await?;
            n as usize
        };
        if !decided.causes.is_empty() {
            let (ids, causes): (Vec<i64>, Vec<String>) = decided.causes.into_iter().unzip();
            sqlx::query(
                "UPDATE task_run r SET waiting_cause = c.cause
                 FROM UNNEST($1::bigint[], $2::text[]) AS c(id, cause)
                 WHERE r.id = c.id AND r.status = 'PENDING'",
            )
            .bind(ids)
            .bind(causes)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        if promoted > 0 {
            self.signals.raise(Signal::Available);
        }
        Ok(PromoteReport {
            skipped: false,
            promoted,
            waiting: pending.len() - promoted,
        })
    }

    async fn run_claim_many(&self, claim: &Claim<'_>, now: Ts) -> Result<Vec<ClaimedRun>> {
        if claim.limit <= 0 {
            return Ok(Vec::new());
        }
        let mut tx = self.begin(CLAIM.begin).await?;
        let sql = match sqlx::raw_sql(CLAIM_LOCK).execute(&mut *tx).await {
            Ok(_) => CLAIM.sql,
            Err(e) if is_lock_timeout(&e) => {
                tracing::warn!(
                    "the claim lock was held for over {}; claiming around its holder",
                    claim_lock_timeout!()
                );
                drop(tx);
                tx = self.begin(CLAIM_AROUND.begin).await?;
                CLAIM_AROUND.sql
            }
            Err(e) => return Err(e.into()),
        };
        let rows: Vec<ClaimRow> = sqlx::query_as(sql)
            .bind(claim.replica_id)
            .bind(claim.labels)
            .bind(claim.limit)
            .bind(now)
            .bind(millis(claim.heartbeat_timeout))
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        rows.into_iter().map(ClaimRow::into_claimed).collect()
    }

    async fn run_finish_many(
        &self,
        replica_id: &str,
        finishes: &[Finish],
        now: Ts,
    ) -> Result<FinishReport> {
        if finishes.is_empty() {
            return Ok(FinishReport::default());
        }
        let mut tx = self.begin(FINISH.begin).await?;
        let done: Vec<FinishedRow> = sqlx::query_as(FINISH.sql)
            .bind(replica_id)
            .bind(finishes.iter().map(|f| f.run_id).collect::<Vec<_>>())
            .bind(
                finishes
                    .iter()
                    .map(|f| f.status.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(finishes.iter().map(|f| f.result_code).collect::<Vec<_>>())
            .bind(finishes.iter().map(|f| f.error.clone()).collect::<Vec<_>>())
            .bind(now)
            .fetch_all(&mut *tx)
            .await?;
        Self::nested_loops_back(&mut tx).await?;
        let report = FinishedRow::report(&done, finishes);
        let (retried, notified) = Self::runs_ended(&mut tx, &self.targets(), &done, now).await?;
        Self::notify(&mut tx, Signal::Changed).await?;
        let queued = Self::notify_deliveries(&mut tx, &notified).await?;
        tx.commit().await?;
        self.signals.raise(Signal::Changed);
        if queued {
            self.signals.raise(Signal::Deliveries);
        }
        Ok(FinishReport {
            retried,
            notified,
            ..report
        })
    }

    async fn run_heartbeat_many(
        &self,
        replica_id: &str,
        beats: &[(i64, Duration)],
        now: Ts,
    ) -> Result<Vec<i64>> {
        if beats.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.begin(RUN_HEARTBEAT.begin).await?;
        let owned = sqlx::query_scalar(RUN_HEARTBEAT.sql)
            .bind(replica_id)
            .bind(beats.iter().map(|b| b.0).collect::<Vec<_>>())
            .bind(beats.iter().map(|b| millis(b.1)).collect::<Vec<_>>())
            .bind(now)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(owned)
    }

    async fn run_log_append(
        &self,
        replica_id: &str,
        run_id: i64,
        lines: &[LogLine],
    ) -> Result<bool> {
        // Who: executors capturing output. FOR SHARE waits for a concurrent
        // cancel to commit and then sees it, so no line lands after one.
        let owned: Option<i64> = sqlx::query_scalar(
            "WITH owned AS (
                SELECT id FROM task_run WHERE id = $2 AND status = 'RUNNING' AND replica_id = $1
                FOR SHARE),
            written AS (
                INSERT INTO run_log (run_id, at, stream, line)
                SELECT owned.id, x.at, x.stream, x.line FROM owned,
                    UNNEST($3::timestamptz[], $4::text[], $5::text[]) AS x(at, stream, line))
            SELECT id FROM owned",
        )
        .bind(replica_id)
        .bind(run_id)
        .bind(lines.iter().map(|l| l.at).collect::<Vec<_>>())
        .bind(lines.iter().map(|l| l.stream).collect::<Vec<_>>())
        .bind(lines.iter().map(|l| l.line.clone()).collect::<Vec<_>>())
        .fetch_optional(&self.pool)
        .await?;
        Ok(owned.is_some())
    }

    async fn run_get(&self, id: i64) -> Result<RunView> {
        self.read_run(id).await
    }

    async fn run_log(&self, id: i64) -> Result<String> {
        self.read_run_log(id).await
    }

    async fn run_log_tail(&self, id: i64, limit: i64) -> Result<app::views::LogTail> {
        self.read_log_tail(id, limit).await
    }

    async fn overview_stats(&self, now: Ts) -> Result<OverviewStats> {
        self.read_overview_stats(now).await
    }

    async fn event_list(&self, after_id: i64, limit: i64) -> Result<Vec<EventView>> {
        self.read_events(after_id, limit).await
    }

    async fn run_sweep(&self, stale_after: Duration, now: Ts) -> Result<SweepReport> {
        let stale_since = now.minus(stale_after);
        let mut tx = self.begin(BEGIN_INDEX_ONLY).await?;
        let sql = sqlx::AssertSqlSafe(format!(
            "{} FOR UPDATE OF r SKIP LOCKED",
            liveness::SWEEP_CANDIDATES
        ));
        let found: Vec<SweepCandidate> = sqlx::query_as(sql)
            .bind(stale_since)
            .bind(now)
            .fetch_all(&mut *tx)
            .await?;
        if found.is_empty() {
            return Ok(SweepReport::default());
        }
        let causes: Vec<String> = found.iter().map(|c| c.cause(stale_since, now)).collect();
        // Who: the leader's sweeper. Conditional on the run still being
        // RUNNING on the replica it was seen on.
        Self::hash_joined(&mut tx).await?;
        let done: Vec<FinishedRow> = sqlx::query_as(
            "WITH f AS (
                SELECT * FROM UNNEST($1::bigint[], $2::text[], $3::text[]) AS f(id, replica, cause)),
            done AS (
                UPDATE task_run r SET status = 'FAILED', finished_at = $4, error = f.cause
                FROM f WHERE r.id = f.id AND r.status = 'RUNNING'
                    AND r.replica_id IS NOT DISTINCT FROM f.replica
                RETURNING r.id, r.plan_id, r.status, r.task_id, r.attempt, r.max_attempts,
                    r.replica_id, r.error),
            logged AS (
                INSERT INTO run_event (run_id, from_status, to_status, replica_id, actor, at, detail)
                SELECT id, 'RUNNING', 'FAILED', replica_id, $5, $4, error FROM done)
            SELECT id, plan_id, status, task_id, attempt, max_attempts FROM done",
        )
        .bind(found.iter().map(|c| c.id).collect::<Vec<_>>())
        .bind(found.iter().map(|c| c.replica_id.clone()).collect::<Vec<_>>())
        .bind(&causes)
        .bind(now)
        .bind(SCHEDULER)
        .fetch_all(&mut *tx)
        .await?;
        Self::nested_loops_back(&mut tx).await?;
        let (retried, notified) = Self::runs_ended(&mut tx, &self.targets(), &done, now).await?;
        // A replica still executing one of these (a missed deadline) hears
        // it at once and stops it.
        Self::notify(&mut tx, Signal::Canceled).await?;
        let queued = Self::notify_deliveries(&mut tx, &notified).await?;
        tx.commit().await?;
        self.signals.raise(Signal::Canceled);
        self.signals.raise(Signal::Changed);
        if queued {
            self.signals.raise(Signal::Deliveries);
        }
        Ok(SweepReport::new(&found, causes, &done, retried, notified))
    }

    async fn run_hand_back_many(
        &self,
        replica_id: &str,
        run_ids: &[i64],
        detail: &str,
        now: Ts,
    ) -> Result<Vec<i64>> {
        if run_ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.pool.begin().await?;
        // Who: a replica shutting down. The run keeps its attempt and the
        // target and plan slot it holds; any replica may claim it again.
        let back: Vec<i64> = sqlx::query_scalar(
            "WITH back AS (
                UPDATE task_run SET status = 'AVAILABLE', replica_id = NULL, started_at = NULL,
                    last_heartbeat_at = NULL, heartbeat_deadline = NULL, deadline = NULL
                WHERE id = ANY($2) AND status = 'RUNNING' AND replica_id = $1 RETURNING id)
            INSERT INTO run_event (run_id, from_status, to_status, replica_id, actor, at, detail)
            SELECT id, 'RUNNING', 'AVAILABLE', $1, $1, $3, $4 FROM back RETURNING run_id",
        )
        .bind(replica_id)
        .bind(run_ids)
        .bind(now)
        .bind(detail)
        .fetch_all(&mut *tx)
        .await?;
        Self::notify(&mut tx, Signal::Available).await?;
        tx.commit().await?;
        Ok(back)
    }

    async fn lease_acquire(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
        now: Ts,
    ) -> Result<Lease> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(liveness::LEASE_ACQUIRE)
            .bind(name)
            .bind(holder)
            .bind(now)
            .bind(now.plus(ttl))
            .execute(&mut *tx)
            .await?;
        let lease = sqlx::query_as(liveness::LEASE_GET)
            .bind(name)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(lease)
    }

    async fn lease_release(&self, name: &str, holder: &str) -> Result<()> {
        sqlx::query(liveness::LEASE_RELEASE)
            .bind(name)
            .bind(holder)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn lease_get(&self, name: &str) -> Result<Option<Lease>> {
        Ok(sqlx::query_as(liveness::LEASE_GET)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn replica_prune(&self, before: Ts) -> Result<u64> {
        Ok(sqlx::query(liveness::REPLICA_PRUNE)
            .bind(before)
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    async fn delivery_take_due(
        &self,
        replica_id: &str,
        limit: i64,
        lock_for: Duration,
        now: Ts,
    ) -> Result<Vec<DueDelivery>> {
        let sql = notify::DELIVERY_TAKE.replace("{lock}", "FOR UPDATE SKIP LOCKED");
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(replica_id)
            .bind(limit)
            .bind(now)
            .bind(now.plus(lock_for))
            .fetch_all(&self.pool)
            .await?)
    }

    async fn delivery_record(
        &self,
        replica_id: &str,
        delivery: &DueDelivery,
        outcome: &DeliveryOutcome,
        now: Ts,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        Self::delivery_write(&mut tx, replica_id, delivery, outcome, now).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn delivery_list(&self, plan_id: Option<i64>, limit: i64) -> Result<Vec<DeliveryView>> {
        self.read_deliveries(plan_id, limit).await
    }

    async fn replica_upsert(&self, replica: &ReplicaInfo, now: Ts) -> Result<()> {
        sqlx::query(rows::REPLICA_UPSERT)
            .bind(&replica.replica_id)
            .bind(&replica.hostname)
            .bind(serde_json::to_string(&replica.labels).unwrap_or_else(|_| "[]".into()))
            .bind(&replica.version)
            .bind(replica.started_at)
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn replica_list(&self) -> Result<Vec<ReplicaRecord>> {
        self.read_replicas().await
    }

    async fn replica_delete(&self, replica_id: &str) -> Result<()> {
        sqlx::query(rows::REPLICA_DELETE)
            .bind(replica_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn session_insert(&self, session: &Session, now: Ts) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(sessions::SESSION_PURGE)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        sqlx::query(sessions::SESSION_INSERT)
            .bind(&session.token_hash)
            .bind(&session.user_name)
            .bind(session.created_at)
            .bind(session.expires_at)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn session_get(&self, token_hash: &str, now: Ts) -> Result<Option<Session>> {
        Ok(sqlx::query_as(sessions::SESSION_GET)
            .bind(token_hash)
            .bind(now)
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn session_delete(&self, token_hash: &str) -> Result<()> {
        sqlx::query(sessions::SESSION_DELETE)
            .bind(token_hash)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
#[path = "postgres_plan_tests.rs"]
mod plan_tests;

#[cfg(test)]
#[path = "postgres_lock_tests.rs"]
mod lock_tests;

/// Runs `attempt` again when PostgreSQL broke a deadlock by failing it
/// (SQLSTATE 40P01). Plan-wide actions lock many runs; a finish batch or a
/// claim may hold some of them, and whichever order each takes, a cycle
/// can form on a plan of thousands of tasks (a 40,000-task cancel once
/// answered 500). Each attempt is a whole transaction, so a retry is safe.
async fn retrying_deadlocks<T, F, Fut>(mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    const TRIES: u32 = 5;
    let mut tried = 1;
    loop {
        match attempt().await {
            Err(StoreError::Database(sqlx::Error::Database(e)))
                if e.code().as_deref() == Some("40P01") && tried < TRIES =>
            {
                tracing::warn!(tried, "deadlock broken by PostgreSQL; trying again");
                tokio::time::sleep(std::time::Duration::from_millis(20 * u64::from(tried))).await;
                tried += 1;
            }
            other => return other,
        }
    }
}
