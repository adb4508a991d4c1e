//! The SQLite store: one file, one process, no set-up (the default).
//!
//! Every write transaction starts with `BEGIN IMMEDIATE`, so SQLite's single
//! writer lock serialises them: a read-then-write inside one (a promotion
//! round, a claim) cannot interleave with another, even from a second
//! connection pool on the same file. Lists travel as JSON arrays expanded
//! with `json_each`. SQLite has no data-modifying CTEs, so a status change
//! and its events are two statements in one transaction.

use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use app::model::{DeliveryView, EventView, PlanList, PlanStatus, PlanView, RunView};
use serde_json::json;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Sqlite, Transaction};

use super::dashboard::{self, OverviewStats};
use super::gates::{self, NodeLabels};
use super::liveness::{self, Lease, SweepCandidate, SweepReport};
use super::notify::{self, DeliveryOutcome, DueDelivery, NotifyTargets, PlanOutcomes};
use super::rows::{self, ClaimRow, FinishedRow, PlanTasks, millis};
use super::sessions::{self, Session};
use super::signals::{Signal, Signals};
use super::sqlite_checkpoint::{BACKSTOP_PAGES, Checkpointer};
use super::sqlite_submit;
use super::submission::{self, IdempotencyKey, Submitted};
use super::{
    Actor, Backend, Claim, ClaimedRun, Finish, FinishReport, LogLine, PromoteReport, ReplicaInfo,
    ReplicaRecord, Result, SCHEDULER, Store, StoreError, Ts,
};
use crate::plan::NewPlan;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

/// Readers run in parallel under WAL; writers queue on SQLite's lock.
const DEFAULT_POOL_SIZE: u32 = 8;

/// Rows a statement's worker thread may hand over before it waits for the
/// reader. sqlx's default, 50, stops the thread every 50 rows until the
/// async side catches up: a claim of 2,048 runs or a promotion round
/// reading every PENDING run cost dozens of thread hand-offs each. With
/// room for a whole batch the thread runs the statement through (`baton
/// bench`: 4 of 4 pairs faster, about 8 % more runs/s on SQLite).
const ROW_BUFFER: usize = 4096;

pub struct SqliteStore {
    pool: SqlitePool,
    signals: Arc<Signals>,
    /// Queues this process's writers in order. SQLite's own busy handler
    /// would make them poll the lock with sleeps of up to 100 ms; waiting
    /// here instead hands the lock over at once. Other processes (or other
    /// stores on the same file) still meet at SQLite's lock.
    writer: tokio::sync::Mutex<()>,
    targets: RwLock<NotifyTargets>,
    /// Keeps checkpoints out of the commits; see [`Checkpointer`].
    _checkpointer: Checkpointer,
}

/// A write transaction and this process's writer slot, held together.
type WriteTx<'a> = (
    tokio::sync::MutexGuard<'a, ()>,
    Transaction<'static, Sqlite>,
);

impl SqliteStore {
    /// Opens (creating if needed) the database file at `path`.
    pub async fn open(path: &str) -> Result<Self> {
        if let Some(dir) = Path::new(path)
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Database(sqlx::Error::Io(e)))?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // WAL + NORMAL: durable across process crashes, fsync per
            // checkpoint rather than per commit.
            .synchronous(SqliteSynchronous::Normal)
            .pragma("wal_autocheckpoint", BACKSTOP_PAGES)
            .busy_timeout(Duration::from_secs(30))
            .foreign_keys(true)
            .row_buffer_size(ROW_BUFFER);
        let pool = SqlitePoolOptions::new()
            .max_connections(DEFAULT_POOL_SIZE)
            .connect_with(options)
            .await?;
        Ok(SqliteStore {
            _checkpointer: Checkpointer::start(pool.clone()),
            pool,
            signals: Arc::default(),
            writer: tokio::sync::Mutex::new(()),
            targets: RwLock::default(),
        })
    }

    fn targets(&self) -> NotifyTargets {
        self.targets.read().expect("poisoned").clone()
    }

    async fn begin(&self) -> Result<WriteTx<'_>> {
        let slot = self.writer.lock().await;
        Ok((slot, self.pool.begin_with("BEGIN IMMEDIATE").await?))
    }

    /// Writes a plan, its tasks and (when it starts) their first runs in
    /// `tx`, which holds the write lock.
    async fn insert_plan(
        tx: &mut Transaction<'_, Sqlite>,
        plan: &NewPlan,
        actor: Actor<'_>,
        now: Ts,
    ) -> Result<i64> {
        let plan_id: i64 = sqlx::query_scalar(
            "INSERT INTO plan (name, description, parallel_limit, created_at, created_by, webhooks,
                open_tasks)
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
        )
        .bind(&plan.name)
        .bind(&plan.description)
        .bind(plan.parallel_limit)
        .bind(now)
        .bind(actor)
        .bind(rows::webhooks_json(plan)?)
        .bind(plan.tasks.len() as i64)
        .fetch_one(&mut **tx)
        .await?;
        // Ids reserved for the tasks and their first runs, so each task row
        // is written once, pointing at its run: rowids count up from the
        // largest, and this transaction holds the write lock.
        let (last_task, last_run): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT COALESCE(MAX(id), 0) FROM task),
                (SELECT COALESCE(MAX(id), 0) FROM task_run)",
        )
        .fetch_one(&mut **tx)
        .await?;
        let first_run = plan.start.then_some(last_run + 1);
        sqlite_submit::tasks_insert(tx, plan_id, plan, last_task + 1, first_run).await?;
        if plan.start {
            // Copied from the task rows just written: their (plan, name)
            // index hands them over in one range.
            sqlx::query(
                "INSERT INTO task_run (id, task_id, plan_id, attempt, status, target, exclusive,
                    version, node, timeout_ms, max_attempts, run_at, created_at, waiting_cause,
                    reassign_after_ms)
                 SELECT latest_run_id, id, plan_id, 1, 'PENDING', target, exclusive, version, node,
                    timeout_ms, max_attempts, run_at, $2, $3, reassign_after_ms
                 FROM task WHERE plan_id = $1 ORDER BY latest_run_id",
            )
            .bind(plan_id)
            .bind(now)
            .bind(gates::CAUSE_NEW)
            .execute(&mut **tx)
            .await?;
            // The runs above the reserved range's start are the ones just
            // made: a range of the primary key, not a second pass over the
            // tasks.
            sqlx::query(
                "INSERT INTO run_event (run_id, from_status, to_status, actor, at, detail)
                 SELECT id, NULL, 'PENDING', $2, $3, 'submitted' FROM task_run WHERE id > $1",
            )
            .bind(last_run)
            .bind(actor)
            .bind(now)
            .execute(&mut **tx)
            .await?;
        }
        Ok(plan_id)
    }

    /// Creates the next attempt (PENDING) of each task; see the PostgreSQL
    /// twin for the contract.
    async fn runs_create(
        tx: &mut Transaction<'_, Sqlite>,
        task_ids: &[i64],
        run_at: &[Option<Ts>],
        actor: Actor<'_>,
        detail: &str,
        now: Ts,
    ) -> Result<Vec<i64>> {
        if task_ids.is_empty() {
            return Ok(Vec::new());
        }
        let wanted: Vec<_> = task_ids
            .iter()
            .zip(run_at)
            .map(|(id, at)| json!([id, at.map(Ts::micros)]))
            .collect();
        let made: Vec<(i64, i64)> = sqlx::query_as(
            "INSERT INTO task_run (task_id, plan_id, attempt, status, target, exclusive, version,
                node, timeout_ms, max_attempts, run_at, created_at, waiting_cause,
                reassign_after_ms)
             SELECT t.id, t.plan_id, COALESCE(prev.attempt, 0) + 1, 'PENDING', t.target,
                t.exclusive, t.version, t.node, t.timeout_ms, t.max_attempts,
                COALESCE(x.value ->> 1, t.run_at), $2, $3, t.reassign_after_ms
             FROM json_each($1) AS x
             JOIN task t ON t.id = x.value ->> 0
             LEFT JOIN task_run prev ON prev.id = t.latest_run_id
             ORDER BY x.key
             RETURNING id, task_id",
        )
        .bind(serde_json::Value::Array(wanted).to_string())
        .bind(now)
        .bind(gates::CAUSE_NEW)
        .fetch_all(&mut **tx)
        .await?;
        let pairs: Vec<_> = made.iter().map(|(id, task)| json!([id, task])).collect();
        sqlx::query(
            "UPDATE task SET latest_run_id = x.value ->> 0
             FROM json_each($1) AS x WHERE task.id = x.value ->> 1",
        )
        .bind(serde_json::Value::Array(pairs).to_string())
        .execute(&mut **tx)
        .await?;
        let ids: Vec<i64> = made.into_iter().map(|(id, _)| id).collect();
        sqlx::query(
            "INSERT INTO run_event (run_id, from_status, to_status, actor, at, detail)
             SELECT x.value, NULL, 'PENDING', $2, $3, $4 FROM json_each($1) AS x",
        )
        .bind(id_list(&ids))
        .bind(actor)
        .bind(now)
        .bind(detail)
        .execute(&mut **tx)
        .await?;
        Ok(ids)
    }

    /// Moves the given live runs to CANCELED with one event each.
    async fn runs_cancel(
        tx: &mut Transaction<'_, Sqlite>,
        run_ids: &[i64],
        actor: Actor<'_>,
        now: Ts,
    ) -> Result<u64> {
        let old: Vec<(i64, String, Option<String>)> = sqlx::query_as(
            "SELECT id, status, replica_id FROM task_run
             WHERE id IN (SELECT value FROM json_each($1))
               AND status IN ('PENDING', 'AVAILABLE', 'RUNNING')",
        )
        .bind(id_list(run_ids))
        .fetch_all(&mut **tx)
        .await?;
        if old.is_empty() {
            return Ok(0);
        }
        let detail = format!("canceled by {actor}");
        let ids: Vec<i64> = old.iter().map(|(id, _, _)| *id).collect();
        sqlx::query(
            "UPDATE task_run SET status = 'CANCELED', finished_at = $2, waiting_cause = NULL, error = $3
             WHERE id IN (SELECT value FROM json_each($1))",
        )
        .bind(id_list(&ids))
        .bind(now)
        .bind(&detail)
        .execute(&mut **tx)
        .await?;
        let events: Vec<_> = old
            .iter()
            .map(|(id, from, replica)| json!([id, from, replica]))
            .collect();
        sqlx::query(
            "INSERT INTO run_event (run_id, from_status, to_status, replica_id, actor, at, detail)
             SELECT x.value ->> 0, x.value ->> 1, 'CANCELED', x.value ->> 2, $2, $3, $4
             FROM json_each($1) AS x",
        )
        .bind(serde_json::Value::Array(events).to_string())
        .bind(actor)
        .bind(now)
        .bind(&detail)
        .execute(&mut **tx)
        .await?;
        Ok(old.len() as u64)
    }

    /// Records RUNNING → final status for runs a finish or sweep just
    /// moved (the error as detail), by `actor`, in id order.
    async fn runs_ended_events(
        tx: &mut Transaction<'_, Sqlite>,
        done: &[FinishedRow],
        actor: Actor<'_>,
        now: Ts,
    ) -> Result<()> {
        let ids: Vec<i64> = done.iter().map(|d| d.id).collect();
        sqlx::query(
            "INSERT INTO run_event (run_id, from_status, to_status, replica_id, actor, at, detail)
             SELECT id, 'RUNNING', status, replica_id, $2, $3, error FROM task_run
             WHERE id IN (SELECT value FROM json_each($1)) ORDER BY id",
        )
        .bind(id_list(&ids))
        .bind(actor)
        .bind(now)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    async fn plan_exists(tx: &mut Transaction<'_, Sqlite>, id: i64) -> Result<()> {
        let found: Option<i64> = sqlx::query_scalar("SELECT id FROM plan WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut **tx)
            .await?;
        found
            .map(|_| ())
            .ok_or(StoreError::NotFound { what: "plan", id })
    }

    async fn task_state(
        tx: &mut Transaction<'_, Sqlite>,
        id: i64,
    ) -> Result<(i64, String, Option<i64>)> {
        sqlx::query_as(rows::TASK_STATE)
            .bind(id)
            .fetch_optional(&mut **tx)
            .await?
            .ok_or(StoreError::NotFound { what: "task", id })
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
        let (_writer, mut tx) = self.begin().await?;
        Self::plan_exists(&mut tx, id).await?;
        let sql = sqlx::AssertSqlSafe(which.select_sql());
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
}

fn id_list(ids: &[i64]) -> String {
    serde_json::to_string(ids).unwrap_or_else(|_| "[]".into())
}

rows::shared_reads!(SqliteStore);
dashboard::dashboard_reads!(SqliteStore, "finished_at / 60000000");
// The write lock every transaction here holds already serialises plans.
gates::round_reads!(SqliteStore, Sqlite);
// One writer at a time: the write lock serialises `notify_plans` too.
notify::notify_step!(SqliteStore, Sqlite);

#[async_trait::async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    fn signals(&self) -> &Arc<Signals> {
        &self.signals
    }

    fn notify_targets_set(&self, targets: NotifyTargets) {
        *self.targets.write().expect("poisoned") = targets;
    }

    async fn signals_forward(&self) -> Result<()> {
        std::future::pending().await
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
        let (_writer, mut tx) = self.begin().await?;
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
        // The write lock orders racing submits: the second finds the key.
        let (_writer, mut tx) = self.begin().await?;
        let expired = now.minus(submission::IDEMPOTENCY_WINDOW);
        sqlx::query("DELETE FROM plan_submission WHERE created_at < $1")
            .bind(expired)
            .execute(&mut *tx)
            .await?;
        let existing: Option<(String, Option<i64>)> = sqlx::query_as(
            "SELECT body_sha256, plan_id FROM plan_submission WHERE idempotency_key = $1",
        )
        .bind(key.key)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(answer) = submission::decide(existing, &key.body_sha256) {
            return Ok(answer);
        }
        let plan_id = Self::insert_plan(&mut tx, plan, actor, now).await?;
        sqlx::query(
            "INSERT INTO plan_submission (idempotency_key, body_sha256, plan_id, created_at)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (idempotency_key) DO UPDATE
                SET body_sha256 = excluded.body_sha256, plan_id = excluded.plan_id",
        )
        .bind(key.key)
        .bind(&key.body_sha256)
        .bind(plan_id)
        .bind(now)
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
        let (_writer, mut tx) = self.begin().await?;
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

    async fn task_retry(&self, id: i64, actor: Actor<'_>, now: Ts) -> Result<i64> {
        let (_writer, mut tx) = self.begin().await?;
        let (plan_id, status, _) = Self::task_state(&mut tx, id).await?;
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
        let (_writer, mut tx) = self.begin().await?;
        let (plan_id, status, run) = Self::task_state(&mut tx, id).await?;
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
        let (_writer, mut tx) = self.begin().await?;
        let (plan_id, status, _) = Self::task_state(&mut tx, id).await?;
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
        tx.commit().await?;
        if notify::any_queued(&notified) {
            self.signals.raise(Signal::Deliveries);
        }
        Ok(plan_id)
    }

    async fn run_promote_round(&self, nodes: &NodeLabels, now: Ts) -> Result<PromoteReport> {
        // BEGIN IMMEDIATE takes the write lock before reading: the state the
        // gates see cannot change until this round commits.
        let (_writer, mut tx) = self.begin().await?;
        let Some((pending, holders)) = Self::round_read(&mut tx).await? else {
            return Ok(PromoteReport::default());
        };
        let decided = gates::evaluate(&pending, &holders, nodes, now);
        if !decided.unpin.is_empty() {
            let unpin: Vec<_> = decided
                .unpin
                .iter()
                .map(|(id, detail)| json!([id, detail]))
                .collect();
            let unpin = serde_json::Value::Array(unpin).to_string();
            sqlx::query(
                "UPDATE task_run SET node = NULL FROM json_each($1) AS x
                 WHERE task_run.id = x.value ->> 0 AND task_run.status = 'PENDING'",
            )
            .bind(&unpin)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "INSERT INTO run_event (run_id, from_status, to_status, actor, at, detail)
                 SELECT x.value ->> 0, 'PENDING', 'PENDING', $2, $3, x.value ->> 1
                 FROM json_each($1) AS x",
            )
            .bind(&unpin)
            .bind(SCHEDULER)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        let mut promoted = 0;
        if !decided.promote.is_empty() {
            let moved: Vec<i64> = sqlx::query_scalar(
                "UPDATE task_run SET status = 'AVAILABLE', waiting_cause = NULL
                 WHERE id IN (SELECT value FROM json_each($1)) AND status = 'PENDING' RETURNING id",
            )
            .bind(id_list(&decided.promote))
            .fetch_all(&mut *tx)
            .await?;
            sqlx::query(
                "INSERT INTO run_event (run_id, from_status, to_status, actor, at)
                 SELECT value, 'PENDING', 'AVAILABLE', $2, $3 FROM json_each($1)",
            )
            .bind(id_list(&moved))
            .bind(SCHEDULER)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            promoted = moved.len();
        }
        if !decided.causes.is_empty() {
            let causes: Vec<_> = decided
                .causes
                .iter()
                .map(|(id, c)| json!([id, c]))
                .collect();
            sqlx::query(
                "UPDATE task_run SET waiting_cause = x.value ->> 1
                 FROM json_each($1) AS x
                 WHERE task_run.id = x.value ->> 0 AND task_run.status = 'PENDING'",
            )
            .bind(serde_json::Value::Array(causes).to_string())
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
        let (_writer, mut tx) = self.begin().await?;
        // Who: every replica's claimer. The write lock makes pick-and-update
        // atomic; `status = 'AVAILABLE'` in the UPDATE keeps it conditional.
        let rows: Vec<ClaimRow> = sqlx::query_as(concat!(
            "UPDATE task_run SET status = 'RUNNING', replica_id = $1, started_at = $4,
                last_heartbeat_at = $4, deadline = $4 + timeout_ms * 1000,
                heartbeat_deadline = $4 + (SELECT ",
            rows::heartbeat_timeout_sql!(),
            " FROM task t WHERE t.id = task_run.task_id) * 1000
             WHERE id IN (
                SELECT id FROM task_run
                WHERE status = 'AVAILABLE'
                  AND (node IS NULL OR node IN (SELECT value FROM json_each($2)))
                ORDER BY id LIMIT $3)
               AND status = 'AVAILABLE'
             RETURNING id, task_id, plan_id, attempt, started_at, deadline,
                (SELECT executor FROM task WHERE id = task_run.task_id) AS executor,
                (SELECT heartbeat_interval_ms FROM task WHERE id = task_run.task_id)
                    AS heartbeat_interval_ms,
                (heartbeat_deadline - started_at) / 1000 AS heartbeat_timeout_ms"
        ))
        .bind(claim.replica_id)
        .bind(serde_json::to_string(claim.labels).unwrap_or_else(|_| "[]".into()))
        .bind(claim.limit)
        .bind(now)
        .bind(millis(claim.heartbeat_timeout))
        .fetch_all(&mut *tx)
        .await?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        sqlx::query(
            "INSERT INTO run_event (run_id, from_status, to_status, replica_id, actor, at)
             SELECT value, 'AVAILABLE', 'RUNNING', $2, $2, $3 FROM json_each($1)",
        )
        .bind(id_list(&ids))
        .bind(claim.replica_id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        let mut claimed = rows
            .into_iter()
            .map(ClaimRow::into_claimed)
            .collect::<Result<Vec<_>>>()?;
        claimed.sort_by_key(|c| c.id);
        Ok(claimed)
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
        let (_writer, mut tx) = self.begin().await?;
        let asked: Vec<_> = finishes
            .iter()
            .map(|f| json!([f.run_id, f.status.as_str(), f.result_code, f.error]))
            .collect();
        // Fenced: only runs still RUNNING and owned by this replica change.
        let done: Vec<FinishedRow> = sqlx::query_as(
            "UPDATE task_run SET status = x.value ->> 1, finished_at = $3,
                result_code = x.value ->> 2, error = x.value ->> 3
             FROM json_each($2) AS x
             WHERE task_run.id = x.value ->> 0 AND task_run.status = 'RUNNING'
               AND task_run.replica_id = $1
             RETURNING task_run.id, task_run.plan_id, task_run.status, task_run.task_id,
                task_run.attempt,
                task_run.max_attempts",
        )
        .bind(replica_id)
        .bind(serde_json::Value::Array(asked).to_string())
        .bind(now)
        .fetch_all(&mut *tx)
        .await?;
        Self::runs_ended_events(&mut tx, &done, replica_id, now).await?;
        let report = FinishedRow::report(&done, finishes);
        let (retried, notified) = Self::runs_ended(&mut tx, &self.targets(), &done, now).await?;
        tx.commit().await?;
        self.signals.raise(Signal::Changed);
        if notify::any_queued(&notified) {
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
        let (_writer, mut tx) = self.begin().await?;
        let beats: Vec<_> = beats
            .iter()
            .map(|(id, t)| json!([id, millis(*t)]))
            .collect();
        let owned = sqlx::query_scalar(
            "UPDATE task_run SET last_heartbeat_at = $3,
                heartbeat_deadline = $3 + (x.value ->> 1) * 1000
             FROM json_each($2) AS x
             WHERE task_run.id = x.value ->> 0 AND task_run.status = 'RUNNING'
               AND task_run.replica_id = $1
             RETURNING task_run.id",
        )
        .bind(replica_id)
        .bind(serde_json::Value::Array(beats).to_string())
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
        let (_writer, mut tx) = self.begin().await?;
        let owned: Option<i64> = sqlx::query_scalar(
            "SELECT id FROM task_run WHERE id = $2 AND status = 'RUNNING' AND replica_id = $1",
        )
        .bind(replica_id)
        .bind(run_id)
        .fetch_optional(&mut *tx)
        .await?;
        if owned.is_none() {
            return Ok(false);
        }
        let values: Vec<_> = lines
            .iter()
            .map(|l| json!([l.at.micros(), l.stream, l.line]))
            .collect();
        sqlx::query(
            "INSERT INTO run_log (run_id, at, stream, line)
             SELECT $1, x.value ->> 0, x.value ->> 1, x.value ->> 2 FROM json_each($2) AS x
             ORDER BY x.key",
        )
        .bind(run_id)
        .bind(serde_json::Value::Array(values).to_string())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
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
        let (_writer, mut tx) = self.begin().await?;
        let found: Vec<SweepCandidate> = sqlx::query_as(liveness::SWEEP_CANDIDATES)
            .bind(stale_since)
            .bind(now)
            .fetch_all(&mut *tx)
            .await?;
        if found.is_empty() {
            return Ok(SweepReport::default());
        }
        let causes: Vec<String> = found.iter().map(|c| c.cause(stale_since, now)).collect();
        let failing: Vec<_> = found
            .iter()
            .zip(&causes)
            .map(|(c, cause)| json!([c.id, c.replica_id, cause]))
            .collect();
        // Conditional on the run still being RUNNING on the replica it was
        // seen on (`IS`: NULL-safe equality).
        let done: Vec<FinishedRow> = sqlx::query_as(
            "UPDATE task_run SET status = 'FAILED', finished_at = $2, error = x.value ->> 2
             FROM json_each($1) AS x
             WHERE task_run.id = x.value ->> 0 AND task_run.status = 'RUNNING'
               AND task_run.replica_id IS x.value ->> 1
             RETURNING task_run.id, task_run.plan_id, task_run.status, task_run.task_id,
                task_run.attempt,
                task_run.max_attempts",
        )
        .bind(serde_json::Value::Array(failing).to_string())
        .bind(now)
        .fetch_all(&mut *tx)
        .await?;
        Self::runs_ended_events(&mut tx, &done, SCHEDULER, now).await?;
        let (retried, notified) = Self::runs_ended(&mut tx, &self.targets(), &done, now).await?;
        tx.commit().await?;
        self.signals.raise(Signal::Canceled);
        self.signals.raise(Signal::Changed);
        if notify::any_queued(&notified) {
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
        let (_writer, mut tx) = self.begin().await?;
        let back: Vec<i64> = sqlx::query_scalar(
            "UPDATE task_run SET status = 'AVAILABLE', replica_id = NULL, started_at = NULL,
                last_heartbeat_at = NULL, heartbeat_deadline = NULL, deadline = NULL
             WHERE id IN (SELECT value FROM json_each($2)) AND status = 'RUNNING'
               AND replica_id = $1
             RETURNING id",
        )
        .bind(replica_id)
        .bind(id_list(run_ids))
        .fetch_all(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO run_event (run_id, from_status, to_status, replica_id, actor, at, detail)
             SELECT value, 'RUNNING', 'AVAILABLE', $2, $2, $3, $4 FROM json_each($1)",
        )
        .bind(id_list(&back))
        .bind(replica_id)
        .bind(now)
        .bind(detail)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        if !back.is_empty() {
            self.signals.raise(Signal::Available);
        }
        Ok(back)
    }

    async fn lease_acquire(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
        now: Ts,
    ) -> Result<Lease> {
        let (_writer, mut tx) = self.begin().await?;
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
        let (_writer, mut tx) = self.begin().await?;
        sqlx::query(liveness::LEASE_RELEASE)
            .bind(name)
            .bind(holder)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn lease_get(&self, name: &str) -> Result<Option<Lease>> {
        Ok(sqlx::query_as(liveness::LEASE_GET)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn replica_prune(&self, before: Ts) -> Result<u64> {
        let (_writer, mut tx) = self.begin().await?;
        let pruned = sqlx::query(liveness::REPLICA_PRUNE)
            .bind(before)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(pruned)
    }

    async fn delivery_take_due(
        &self,
        replica_id: &str,
        limit: i64,
        lock_for: Duration,
        now: Ts,
    ) -> Result<Vec<DueDelivery>> {
        let (_writer, mut tx) = self.begin().await?;
        let sql = notify::DELIVERY_TAKE.replace("{lock}", "");
        let due = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(replica_id)
            .bind(limit)
            .bind(now)
            .bind(now.plus(lock_for))
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(due)
    }

    async fn delivery_record(
        &self,
        replica_id: &str,
        delivery: &DueDelivery,
        outcome: &DeliveryOutcome,
        now: Ts,
    ) -> Result<()> {
        let (_writer, mut tx) = self.begin().await?;
        Self::delivery_write(&mut tx, replica_id, delivery, outcome, now).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn delivery_list(&self, plan_id: Option<i64>, limit: i64) -> Result<Vec<DeliveryView>> {
        self.read_deliveries(plan_id, limit).await
    }

    async fn replica_upsert(&self, replica: &ReplicaInfo, now: Ts) -> Result<()> {
        let (_writer, mut tx) = self.begin().await?;
        sqlx::query(rows::REPLICA_UPSERT)
            .bind(&replica.replica_id)
            .bind(&replica.hostname)
            .bind(serde_json::to_string(&replica.labels).unwrap_or_else(|_| "[]".into()))
            .bind(&replica.version)
            .bind(replica.started_at)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn replica_list(&self) -> Result<Vec<ReplicaRecord>> {
        self.read_replicas().await
    }

    async fn replica_delete(&self, replica_id: &str) -> Result<()> {
        let (_writer, mut tx) = self.begin().await?;
        sqlx::query(rows::REPLICA_DELETE)
            .bind(replica_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn session_insert(&self, session: &Session, now: Ts) -> Result<()> {
        let (_writer, mut tx) = self.begin().await?;
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
        let (_writer, mut tx) = self.begin().await?;
        sqlx::query(sessions::SESSION_DELETE)
            .bind(token_hash)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}
