//! The SQLite store: one file, one process, no set-up (the default).
//!
//! Every write transaction starts with `BEGIN IMMEDIATE`, so SQLite's single
//! writer lock serialises them: a read-then-write inside one (a promotion
//! round, a claim) cannot interleave with another, even from a second
//! connection pool on the same file. Lists travel as JSON arrays expanded
//! with `json_each`. SQLite has no data-modifying CTEs, so a status change
//! and its events are two statements in one transaction.

use crate::store::engine::plans::run_columns::run_copies_of_task;
use std::ops::DerefMut;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{Sqlite, Transaction};

use self::checkpoint::{BACKSTOP_PAGES, Checkpointer};
use crate::plan::NewPlan;
use crate::store::engine::dialect::arguments;
use crate::store::engine::gates;
use crate::store::engine::gates::admission::admitted_sql;
use crate::store::engine::liveness::{self, SweepCandidate};
use crate::store::engine::reads::overview;
use crate::store::engine::reads::rows::{self, ClaimRow, FinishedRow, millis};
use crate::store::engine::{Admit, Arg, Dialect, Made, RowLock, Shared, Sql, StoreRow};
use crate::store::signals::Signal;
use crate::store::{Actor, Backend, Beaten, Claim, Finish, LogLine, Result, SCHEDULER, StoreError};
use domain::gates::Decisions;
use domain::time::Ts;

mod checkpoint;
mod packed;
mod serve_lock;
mod submit;

pub use self::serve_lock::ServeLock;

pub(super) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

/// Readers run in parallel under WAL; writers queue on SQLite's lock.
const DEFAULT_POOL_SIZE: u32 = 8;

/// Rows a statement's worker thread may hand over before it waits for the
/// reader. sqlx's default, 50, stops the thread every 50 rows until the
/// async side catches up: a claim of 2,048 runs or a promotion round
/// reading every PENDING run cost dozens of thread hand-offs each. With
/// room for a whole batch the thread runs the statement through (`baton
/// bench`: 4 of 4 pairs faster, about 8 % more runs/s on SQLite).
const ROW_BUFFER: usize = 4096;

/// A heartbeat waits this long for the write lock (the writer slot, then
/// SQLite's own), then says so ([`StoreError::LockWait`]) and is sent
/// again: whoever holds the lock (another program's `BEGIN IMMEDIATE`, a
/// long write here) holds the sweeper up too, so the wait proves as much
/// as a recorded beat (docs/design.md, "Liveness").
const HEARTBEAT_LOCK_WAIT: Duration = Duration::from_millis(200);

pub struct SqliteStore {
    pool: SqlitePool,
    shared: Shared,
    /// Queues this process's writers in order. SQLite's own busy handler
    /// would make them poll the lock with sleeps of up to 100 ms; waiting
    /// here instead hands the lock over at once. Other processes (or other
    /// stores on the same file) still meet at SQLite's lock.
    writer: Arc<tokio::sync::Mutex<()>>,
    /// Keeps checkpoints out of the commits; see [`Checkpointer`].
    _checkpointer: Checkpointer,
}

/// A write transaction and this process's writer slot, held together;
/// the transaction ends (commit or rollback) before the slot is free.
pub struct WriteTx {
    tx: Transaction<'static, Sqlite>,
    _slot: tokio::sync::OwnedMutexGuard<()>,
}

impl WriteTx {
    async fn commit(self) -> Result<()> {
        Ok(self.tx.commit().await?)
    }
}

impl std::ops::Deref for WriteTx {
    type Target = Transaction<'static, Sqlite>;

    fn deref(&self) -> &Self::Target {
        &self.tx
    }
}

impl std::ops::DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.tx
    }
}

/// Whether a connection given back to the pool may serve again: not when it
/// still believes it is inside a transaction. A COMMIT that fails (a full
/// disk) leaves sqlx counting the transaction open; SQLite has already
/// rolled it back, so the ROLLBACK sqlx sends on drop fails too, and the
/// count never comes down: every later `BEGIN IMMEDIATE` on that
/// connection failed ("begin_with at non-zero transaction depth") until
/// the process restarted, long after the space came back. Such a
/// connection is closed and the pool opens a new one. Costs nothing on a
/// committed transaction's connection (no transaction counted).
async fn closes_if_stuck_in_a_transaction(conn: &mut SqliteConnection) -> sqlx::Result<bool> {
    use sqlx::Connection;
    if !conn.is_in_transaction() {
        return Ok(true);
    }
    // A dropped transaction's ROLLBACK is queued on the connection's
    // thread: let it run, then look again.
    conn.ping().await?;
    Ok(!conn.is_in_transaction())
}

/// `journal_size_limit`: 64 MiB, above the backstop checkpoint's 40 MB.
const JOURNAL_SIZE_LIMIT: &str = "67108864";

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
            // The WAL file keeps the size of its largest burst (a prune
            // round writes many pages at once); past this, a checkpoint
            // that empties it also truncates it, so disk use stays
            // bounded with retention on.
            .pragma("journal_size_limit", JOURNAL_SIZE_LIMIT)
            .busy_timeout(Duration::from_secs(30))
            .foreign_keys(true)
            .row_buffer_size(ROW_BUFFER);
        // No ping when a connection is taken from the pool: a connection
        // to a local file does not go away while idle, and each ping is a
        // hop to the connection's thread and back, three of them between
        // a submit and its run's start. sqlx still pings it when it is
        // given back, which rolls back a dropped transaction.
        let pool = SqlitePoolOptions::new()
            .max_connections(DEFAULT_POOL_SIZE)
            .test_before_acquire(false)
            .after_release(|conn, _| Box::pin(closes_if_stuck_in_a_transaction(conn)))
            .connect_with(options)
            .await?;
        Ok(SqliteStore {
            _checkpointer: Checkpointer::start(pool.clone()),
            pool,
            shared: Shared::default(),
            writer: Arc::default(),
        })
    }

    async fn begin_write(&self) -> Result<WriteTx> {
        let slot = self.writer.clone().lock_owned().await;
        Ok(WriteTx {
            tx: self.pool.begin_with("BEGIN IMMEDIATE").await?,
            _slot: slot,
        })
    }

    /// [`SqliteStore::begin_write`] for a heartbeat: bounded by
    /// [`HEARTBEAT_LOCK_WAIT`]. A `BEGIN IMMEDIATE` given up mid-wait may
    /// still take its connection into a transaction; the pool closes such
    /// a connection when it comes back (`closes_if_stuck_in_a_transaction`).
    async fn begin_heartbeat_write(&self) -> Result<WriteTx> {
        tokio::time::timeout(HEARTBEAT_LOCK_WAIT, self.begin_write())
            .await
            .map_err(|_| StoreError::LockWait)?
    }

    /// Moves the runs of `ids` (a JSON list) that are PENDING to
    /// AVAILABLE, with their events and their rows in the queue of
    /// AVAILABLE runs (`available_run`); how many moved.
    async fn promote_ids(tx: &mut Transaction<'_, Sqlite>, ids: &str, now: Ts) -> Result<usize> {
        let promoted = Self::mark_available(tx, ids, now).await?;
        Self::enqueue(tx, ids).await?;
        Ok(promoted)
    }

    /// [`Self::promote_ids`] without the queue rows: for runs claimed in
    /// the same transaction, which no claimer may see AVAILABLE.
    async fn mark_available(tx: &mut Transaction<'_, Sqlite>, ids: &str, now: Ts) -> Result<usize> {
        // No RETURNING: sqlx would hand over a row per run. The round
        // read these runs PENDING under the write lock it still holds,
        // so every one of them moves, and the events join on the new
        // status all the same.
        let promoted = sqlx::query(
            "UPDATE task_run SET status = 'AVAILABLE', waiting_cause = NULL
             WHERE id IN (SELECT value FROM json_each($1)) AND status = 'PENDING'",
        )
        .bind(ids)
        .execute(&mut **tx)
        .await?
        .rows_affected() as usize;
        sqlx::query(
            "INSERT INTO run_event (run_id, from_status, to_status, actor, at)
             SELECT r.id, 'PENDING', 'AVAILABLE', $2, $3
             FROM json_each($1) AS x JOIN task_run r ON r.id = x.value
             WHERE r.status = 'AVAILABLE'",
        )
        .bind(ids)
        .bind(SCHEDULER)
        .bind(now)
        .execute(&mut **tx)
        .await?;
        Ok(promoted)
    }

    /// Queues the runs of `ids` (a JSON list) that are AVAILABLE for
    /// claimers (`available_run`, docs/design.md, "Run storage"): for a
    /// statement that just moved them there.
    async fn enqueue(tx: &mut Transaction<'_, Sqlite>, ids: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO available_run (run_id, node)
             SELECT r.id, r.node FROM json_each($1) AS x JOIN task_run r ON r.id = x.value
             WHERE r.status = 'AVAILABLE'",
        )
        .bind(ids)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Claims the queued AVAILABLE runs of `picked` (a JSON list read
    /// under the write lock `tx` holds) for the replica, started at `now`,
    /// with their events; the claimed rows.
    async fn claim_picked(
        tx: &mut Transaction<'_, Sqlite>,
        picked: &str,
        claim: &Claim<'_>,
        now: Ts,
    ) -> Result<Vec<ClaimRow>> {
        sqlx::query("DELETE FROM available_run WHERE run_id IN (SELECT value FROM json_each($1))")
            .bind(picked)
            .execute(&mut **tx)
            .await?;
        Self::mark_running(tx, picked, claim, now).await
    }

    /// [`Self::claim_picked`] for runs that are not queued: those a round
    /// moved to AVAILABLE in this transaction ([`Self::mark_available`]).
    async fn mark_running(
        tx: &mut Transaction<'_, Sqlite>,
        picked: &str,
        claim: &Claim<'_>,
        now: Ts,
    ) -> Result<Vec<ClaimRow>> {
        let claimed = sqlx::query(concat!(
            "UPDATE task_run SET status = 'RUNNING', replica_id = $1, started_at = $4,
                last_heartbeat_at = $4, deadline = $4 + timeout_ms * 1000,
                heartbeat_deadline = $4 + (SELECT ",
            rows::heartbeat_timeout_sql!("$3"),
            " FROM task t WHERE t.id = task_run.task_id) * 1000
             WHERE id IN (SELECT value FROM json_each($2)) AND status = 'AVAILABLE'"
        ))
        .bind(claim.replica_id)
        .bind(picked)
        .bind(millis(claim.heartbeat_timeout))
        .bind(now)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        sqlx::query(
            "INSERT INTO run_event (run_id, from_status, to_status, replica_id, actor, at)
             SELECT value, 'AVAILABLE', 'RUNNING', $2, $2, $3 FROM json_each($1)",
        )
        .bind(picked)
        .bind(claim.replica_id)
        .bind(now)
        .execute(&mut **tx)
        .await?;
        let rows: String = sqlx::query_scalar(
            "SELECT json_group_array(json_array(r.id, r.task_id, r.plan_id, r.attempt,
                r.started_at, r.deadline, r.dependents, t.executor, t.heartbeat_interval_ms,
                (r.heartbeat_deadline - r.started_at) / 1000))
             FROM json_each($1) AS x JOIN task_run r ON r.id = x.value
             JOIN task t ON t.id = r.task_id",
        )
        .bind(picked)
        .fetch_one(&mut **tx)
        .await?;
        // The read-back has a row for every picked run.
        let rows = packed::claimed_rows(&rows)?;
        if claimed != rows.len() as u64 {
            // Cannot happen under the write lock; dropped, the claim rolls back.
            return Err(StoreError::Corrupt(format!(
                "a claim picked {} AVAILABLE runs and changed {claimed}",
                rows.len()
            )));
        }
        Ok(rows)
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
             SELECT id, 'RUNNING', status, replica_id,
                CASE WHEN status = 'CANCELED' THEN cancel_requested_by ELSE $2 END, $3, error
             FROM task_run
             WHERE id IN (SELECT value FROM json_each($1)) ORDER BY id",
        )
        .bind(id_list(&ids))
        .bind(actor)
        .bind(now)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }
}

fn id_list(ids: &[i64]) -> String {
    serde_json::to_string(ids).unwrap_or_else(|_| "[]".into())
}

#[async_trait::async_trait]
impl Dialect for SqliteStore {
    type Tx = WriteTx;

    const BACKEND: Backend = Backend::Sqlite;

    // The database is a file on this host: its clock is this one.
    const CLOCK: Option<&'static str> = None;
    const MIXED_BUILDS: bool = false;

    const FINISHED_PER_MINUTE: &'static str =
        overview::finished_per_minute_sql!("finished_at / 60000000", "COUNT(*)", "task_run");

    fn shared(&self) -> &Shared {
        &self.shared
    }

    async fn begin(&self) -> Result<Self::Tx> {
        self.begin_write().await
    }

    async fn commit(tx: Self::Tx) -> Result<()> {
        tx.commit().await
    }

    async fn execute(tx: &mut Self::Tx, sql: Sql, args: &[Arg<'_>]) -> Result<u64> {
        let (text, keep) = sql.into_parts();
        Ok(sqlx::query_with(text, arguments::<Sqlite>(args)?)
            .persistent(keep)
            .execute(&mut **tx.deref_mut())
            .await?
            .rows_affected())
    }

    async fn fetch_all<R: StoreRow>(
        tx: &mut Self::Tx,
        sql: Sql,
        args: &[Arg<'_>],
    ) -> Result<Vec<R>> {
        let (text, keep) = sql.into_parts();
        Ok(sqlx::query_as_with(text, arguments::<Sqlite>(args)?)
            .persistent(keep)
            .fetch_all(&mut **tx.deref_mut())
            .await?)
    }

    async fn read<R: StoreRow>(&self, sql: Sql, args: &[Arg<'_>]) -> Result<Vec<R>> {
        let (text, keep) = sql.into_parts();
        Ok(sqlx::query_as_with(text, arguments::<Sqlite>(args)?)
            .persistent(keep)
            .fetch_all(&self.pool)
            .await?)
    }

    /// Through the writer slot, like every write here.
    async fn write(&self, sql: Sql, args: &[Arg<'_>]) -> Result<u64> {
        let mut tx = self.begin_write().await?;
        let changed = Self::execute(&mut tx, sql, args).await?;
        tx.commit().await?;
        Ok(changed)
    }

    async fn write_returning<R: StoreRow>(&self, sql: Sql, args: &[Arg<'_>]) -> Result<Vec<R>> {
        let mut tx = self.begin_write().await?;
        let rows = Self::fetch_all(&mut tx, sql, args).await?;
        tx.commit().await?;
        Ok(rows)
    }

    async fn heartbeat_write<R: StoreRow>(&self, sql: Sql, args: &[Arg<'_>]) -> Result<Vec<R>> {
        let mut tx = self.begin_heartbeat_write().await?;
        let rows = Self::fetch_all(&mut tx, sql, args).await?;
        tx.commit().await?;
        Ok(rows)
    }

    fn row_lock(_: RowLock) -> &'static str {
        ""
    }

    /// One process owns the file: its own signals are all there is.
    async fn announce(_: &mut Self::Tx, _: Signal) -> Result<()> {
        Ok(())
    }

    /// SQLite's single writer cannot deadlock.
    fn is_deadlock(_: &StoreError) -> bool {
        false
    }

    async fn runs_create(
        tx: &mut Self::Tx,
        task_ids: &[i64],
        run_at: &[Option<Ts>],
        actor: Actor<'_>,
        detail: &str,
        now: Ts,
    ) -> Result<Vec<i64>> {
        // The statements below run on the transaction itself.
        let tx: &mut Transaction<'static, Sqlite> = tx;
        let wanted: Vec<_> = task_ids
            .iter()
            .zip(run_at)
            .map(|(id, at)| json!([id, at.map(Ts::micros)]))
            .collect();
        let made: Vec<(i64, i64)> = sqlx::query_as(concat!(
            "INSERT INTO task_run (task_id, plan_id, attempt, status, run_at, created_at,
                waiting_cause, held, dependents, approval_pending, ",
            run_copies_of_task!(""),
            ")
             SELECT t.id, t.plan_id, COALESCE(prev.attempt, 0) + 1, 'PENDING',
                COALESCE(x.value ->> 1, t.run_at), $2, $3, t.deps_open > 0, t.has_dependents,
                t.approval IS NOT NULL AND t.approved_at IS NULL, ",
            run_copies_of_task!("t."),
            "
             FROM json_each($1) AS x
             JOIN task t ON t.id = x.value ->> 0
             LEFT JOIN task_run prev ON prev.id = t.latest_run_id
             ORDER BY x.key
             RETURNING id, task_id"
        ))
        .bind(serde_json::Value::Array(wanted).to_string())
        .bind(now)
        .bind(domain::gates::CAUSE_NEW)
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

    async fn runs_cancel(
        tx: &mut Self::Tx,
        run_ids: &[i64],
        actor: Actor<'_>,
        now: Ts,
    ) -> Result<u64> {
        // The statements below run on the transaction itself.
        let tx: &mut Transaction<'static, Sqlite> = tx;
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
        // A RUNNING run is only asked to stop: it keeps its status (and
        // its target, slot and version) until its replica confirms the
        // kill in its finish, or the sweeper finds that replica stale.
        let (running, old): (Vec<_>, Vec<_>) = old
            .into_iter()
            .partition(|(_, status, _)| status == "RUNNING");
        let running: Vec<i64> = running.into_iter().map(|(id, _, _)| id).collect();
        let asked = sqlx::query(
            "UPDATE task_run SET cancel_requested_by = $2, cancel_requested_at = $3
             WHERE id IN (SELECT value FROM json_each($1)) AND cancel_requested_by IS NULL",
        )
        .bind(id_list(&running))
        .bind(actor)
        .bind(now)
        .execute(&mut **tx)
        .await?
        .rows_affected();
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
        sqlx::query("DELETE FROM available_run WHERE run_id IN (SELECT value FROM json_each($1))")
            .bind(id_list(&ids))
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
        Ok(old.len() as u64 + asked)
    }

    /// One process owns the file: there is nobody else to hear.
    async fn listen(&self) -> Result<()> {
        std::future::pending().await
    }

    fn migrator(&self) -> &'static Migrator {
        &MIGRATOR
    }

    async fn migrate(&self) -> Result<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    /// `BEGIN IMMEDIATE` took the write lock before the round reads: the
    /// state the gates see cannot change until it commits.
    async fn round_begin(&self) -> Result<Self::Tx> {
        self.begin().await
    }

    /// Every round has the lock. Read through [`packed::pending_runs`].
    const PENDING_RUNS: &'static str = gates::pending_runs_sql!("TRUE");

    async fn pending_runs(tx: &mut Self::Tx) -> Result<Vec<domain::gates::PendingRun>> {
        packed::pending_runs(tx).await
    }

    /// The write lock the transaction already holds serialises it with
    /// every round.
    async fn promoter_lock_wait(_: &mut Self::Tx, _: Duration) -> Result<()> {
        Ok(())
    }

    async fn round_write(tx: &mut Self::Tx, decided: &Decisions, now: Ts) -> Result<usize> {
        // The statements below run on the transaction itself.
        let tx: &mut Transaction<'static, Sqlite> = tx;
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
            .execute(&mut **tx)
            .await?;
            sqlx::query(
                "INSERT INTO run_event (run_id, from_status, to_status, actor, at, detail)
                 SELECT x.value ->> 0, 'PENDING', 'PENDING', $2, $3, x.value ->> 1
                 FROM json_each($1) AS x",
            )
            .bind(&unpin)
            .bind(SCHEDULER)
            .bind(now)
            .execute(&mut **tx)
            .await?;
        }
        let mut promoted = 0;
        if !decided.promote.is_empty() {
            promoted = Self::promote_ids(tx, &id_list(&decided.promote), now).await?;
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
            .execute(&mut **tx)
            .await?;
        }
        Ok(promoted)
    }

    async fn runs_claim(&self, claim: &Claim<'_>, asked: Ts) -> Result<Vec<ClaimRow>> {
        let asked_at = Instant::now();
        let mut tx = self.begin_write().await?;
        let now = asked.plus(asked_at.elapsed());
        // Who: every replica's claimer. The write lock makes pick, update
        // and read-back one step; `status = 'AVAILABLE'` in the UPDATE
        // keeps it conditional all the same. Ids, then the claimed rows,
        // come back as one JSON text each, not a row per run ([`packed`]).
        let picked: String = sqlx::query_scalar(
            "SELECT json_group_array(run_id) FROM (
                SELECT run_id FROM available_run
                WHERE node IS NULL OR node IN (SELECT value FROM json_each($1))
                ORDER BY run_id LIMIT $2)",
        )
        .bind(serde_json::to_string(claim.labels).unwrap_or_else(|_| "[]".into()))
        .bind(claim.limit)
        .fetch_one(&mut **tx)
        .await?;
        if picked == "[]" {
            return Ok(Vec::new());
        }
        let rows = Self::claim_picked(&mut tx, &picked, claim, now).await?;
        tx.commit().await?;
        Ok(rows)
    }

    async fn round_claim(
        tx: &mut Self::Tx,
        ids: &[i64],
        claim: &Claim<'_>,
        now: Ts,
        started: Ts,
    ) -> Result<Vec<ClaimRow>> {
        let tx: &mut Transaction<'static, Sqlite> = tx;
        // Through AVAILABLE and on at once, under the write lock: no other
        // transaction sees them AVAILABLE, so they never enter the queue of
        // AVAILABLE runs (two statements fewer between a submit and its
        // run's start), and the events are a promotion's and a claim's, in
        // that order.
        let ids = id_list(ids);
        Self::mark_available(tx, &ids, now).await?;
        Self::mark_running(tx, &ids, claim, started).await
    }

    async fn runs_finish(
        &self,
        replica_id: &str,
        finishes: &[Finish],
        now: Ts,
    ) -> Result<(Self::Tx, Vec<FinishedRow>)> {
        let mut tx = self.begin_write().await?;
        // One finish per run (`engine::execution::endings` keeps the first).
        let asked: Vec<_> = finishes
            .iter()
            .map(|f| json!([f.run_id, f.status.as_str(), f.result_code, f.error]))
            .collect();
        let asked = serde_json::Value::Array(asked).to_string();
        // Fenced: only runs still RUNNING and owned by this replica change.
        // They are read before the update, under the write lock it shares,
        // as one JSON text rather than a row per run ([`packed`]).
        let fenced: String = sqlx::query_scalar(concat!(
            "SELECT json_group_array(json_array(r.id, r.plan_id, ",
            rows::cancel_status_sql!("(x.value ->> 1)", "r"),
            ", r.task_id, r.attempt, r.max_attempts, r.dependents))
             FROM json_each($2) AS x JOIN task_run r ON r.id = x.value ->> 0
             WHERE r.status = 'RUNNING' AND r.replica_id = $1"
        ))
        .bind(replica_id)
        .bind(&asked)
        .fetch_one(&mut **tx)
        .await?;
        let done = packed::finished_rows(&fenced)?;
        if !done.is_empty() {
            let ended = sqlx::query(concat!(
                "UPDATE task_run SET status = ",
                rows::cancel_status_sql!("(x.value ->> 1)", "task_run"),
                ", finished_at = $3, result_code = x.value ->> 2, error = ",
                rows::cancel_error_sql!("(x.value ->> 1)", "task_run", "(x.value ->> 3)", "''"),
                "
                 FROM json_each($2) AS x
                 WHERE task_run.id = x.value ->> 0 AND task_run.status = 'RUNNING'
                   AND task_run.replica_id = $1"
            ))
            .bind(replica_id)
            .bind(&asked)
            .bind(now)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            if ended != done.len() as u64 {
                // Cannot happen under the write lock; dropped, the batch rolls back.
                return Err(StoreError::Corrupt(format!(
                    "a finish read {} runs it owned and changed {ended}",
                    done.len()
                )));
            }
        }
        Self::runs_ended_events(&mut tx, &done, replica_id, now).await?;
        Ok((tx, done))
    }

    async fn runs_heartbeat(
        &self,
        replica_id: &str,
        beats: &[(i64, Duration)],
        now: Ts,
    ) -> Result<Beaten> {
        let mut tx = self.begin_heartbeat_write().await?;
        let beats: Vec<_> = beats
            .iter()
            .map(|(id, t)| json!([id, millis(*t)]))
            .collect();
        let found: Vec<(i64, bool)> = sqlx::query_as(
            "UPDATE task_run SET last_heartbeat_at = $3,
                heartbeat_deadline = $3 + (x.value ->> 1) * 1000
             FROM json_each($2) AS x
             WHERE task_run.id = x.value ->> 0 AND task_run.status = 'RUNNING'
               AND task_run.replica_id = $1
             RETURNING task_run.id, task_run.cancel_requested_by IS NOT NULL",
        )
        .bind(replica_id)
        .bind(serde_json::Value::Array(beats).to_string())
        .bind(now)
        .fetch_all(&mut **tx)
        .await?;
        tx.commit().await?;
        // The write lock is the database's: no row is ever busy here.
        let (canceling, owned): (Vec<_>, Vec<_>) = found.into_iter().partition(|(_, c)| *c);
        Ok(Beaten {
            owned: owned.into_iter().map(|(id, _)| id).collect(),
            canceling: canceling.into_iter().map(|(id, _)| id).collect(),
            held: Vec::new(),
        })
    }

    async fn log_append(&self, replica_id: &str, run_id: i64, lines: &[LogLine]) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let owned: Option<i64> = sqlx::query_scalar(
            "SELECT id FROM task_run WHERE id = $2 AND status = 'RUNNING' AND replica_id = $1",
        )
        .bind(replica_id)
        .bind(run_id)
        .fetch_optional(&mut **tx)
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
        .execute(&mut **tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn sweep_begin(&self) -> Result<Self::Tx> {
        self.begin_write().await
    }

    // The write lock is the whole database's: a heartbeat that cannot be
    // written keeps the sweeper waiting too.
    const SWEEP_CANDIDATES: &'static str =
        liveness::sweep_candidates_sql!("", "p.last_heartbeat < $1");

    async fn runs_fail(
        tx: &mut Self::Tx,
        found: &[SweepCandidate],
        causes: &[String],
        now: Ts,
    ) -> Result<Vec<FinishedRow>> {
        // The statements below run on the transaction itself.
        let tx: &mut Transaction<'static, Sqlite> = tx;
        let failing: Vec<_> = found
            .iter()
            .zip(causes)
            .map(|(c, cause)| json!([c.id, c.replica_id, cause]))
            .collect();
        // Conditional on the run still being RUNNING on the replica it was
        // seen on (`IS`: NULL-safe equality).
        let done: Vec<FinishedRow> = sqlx::query_as(concat!(
            "UPDATE task_run SET status = ",
            rows::cancel_status_sql!("'FAILED'", "task_run"),
            ", finished_at = $2, error = ",
            rows::cancel_error_sql!(
                "'FAILED'",
                "task_run",
                "(x.value ->> 2)",
                "'; ' || (x.value ->> 2)"
            ),
            "
             FROM json_each($1) AS x
             WHERE task_run.id = x.value ->> 0 AND task_run.status = 'RUNNING'
               AND task_run.replica_id IS x.value ->> 1
             RETURNING task_run.id, task_run.plan_id, task_run.status, task_run.task_id,
                task_run.attempt,
                task_run.max_attempts, task_run.dependents"
        ))
        .bind(serde_json::Value::Array(failing).to_string())
        .bind(now)
        .fetch_all(&mut **tx)
        .await?;
        Self::runs_ended_events(tx, &done, SCHEDULER, now).await?;
        Ok(done)
    }

    async fn runs_hand_back(
        tx: &mut Self::Tx,
        replica_id: &str,
        run_ids: &[i64],
        detail: &str,
        now: Ts,
    ) -> Result<Vec<i64>> {
        // The statements below run on the transaction itself.
        let tx: &mut Transaction<'static, Sqlite> = tx;
        let back: Vec<i64> = sqlx::query_scalar(
            "UPDATE task_run SET status = 'AVAILABLE', replica_id = NULL, started_at = NULL,
                last_heartbeat_at = NULL, heartbeat_deadline = NULL, deadline = NULL
             WHERE id IN (SELECT value FROM json_each($2)) AND status = 'RUNNING'
               AND replica_id = $1 AND cancel_requested_by IS NULL
             RETURNING id",
        )
        .bind(replica_id)
        .bind(id_list(run_ids))
        .fetch_all(&mut **tx)
        .await?;
        let back_list = id_list(&back);
        Self::enqueue(tx, &back_list).await?;
        sqlx::query(
            "INSERT INTO run_event (run_id, from_status, to_status, replica_id, actor, at, detail)
             SELECT value, 'RUNNING', 'AVAILABLE', $2, $2, $3, $4 FROM json_each($1)",
        )
        .bind(back_list)
        .bind(replica_id)
        .bind(now)
        .bind(detail)
        .execute(&mut **tx)
        .await?;
        Ok(back)
    }

    async fn plan_write(
        tx: &mut Self::Tx,
        plan: &NewPlan,
        actor: Actor<'_>,
        admit: Admit,
        now: Ts,
    ) -> Result<(i64, Made)> {
        // The statements below run on the transaction itself.
        let tx: &mut Transaction<'static, Sqlite> = tx;
        // The plan, and the largest task and run ids: ids above them are
        // reserved for its tasks and their first runs, so that each task
        // row is written once, pointing at its run (rowids count up from
        // the largest, and this transaction holds the write lock). One
        // statement, not two: each is a hand-off to the connection's
        // thread and back, on a pickup's path (docs/benchmarks.md).
        let (plan_id, last_task, last_run): (i64, i64, i64) = sqlx::query_as(
            "INSERT INTO plan (name, description, parallel_limit, created_at, created_by, webhooks,
                open_tasks, starts_on_submit)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             RETURNING id, (SELECT COALESCE(MAX(id), 0) FROM task),
                (SELECT COALESCE(MAX(id), 0) FROM task_run)",
        )
        .bind(&plan.name)
        .bind(&plan.description)
        .bind(plan.parallel_limit)
        .bind(now)
        .bind(actor)
        .bind(rows::webhooks_json(plan)?)
        .bind(plan.tasks.len() as i64)
        .bind(plan.start)
        .fetch_one(&mut **tx)
        .await?;
        let first_run = plan.start.then_some(last_run + 1);
        submit::tasks_insert(tx, plan_id, plan, last_task + 1, first_run).await?;
        let mut made = Made::default();
        let admitting = admit == Admit::IfClear && plan.admits_runs();
        if plan.start {
            // Copied from the task rows just written: their (plan, name)
            // index hands them over in one range. Admitted as a round
            // would (`gates::admission`): this transaction holds the write
            // lock, which is SQLite's promotion lock too.
            sqlx::query(concat!(
                "INSERT INTO task_run (id, task_id, plan_id, attempt, status, run_at, created_at,
                    waiting_cause, ",
                run_copies_of_task!(""),
                ")
                 SELECT latest_run_id, id, plan_id, 1,
                    CASE WHEN admitted THEN 'AVAILABLE' ELSE 'PENDING' END, run_at, $2,
                    CASE WHEN admitted THEN NULL ELSE $3 END, ",
                run_copies_of_task!(""),
                "
                 FROM (SELECT t.*, $4 AND ",
                admitted_sql!("t.", "t.target NOT IN (SELECT value FROM json_each($5))"),
                " AS admitted FROM task t WHERE t.plan_id = $1)
                 ORDER BY latest_run_id"
            ))
            .bind(plan_id)
            .bind(now)
            .bind(domain::gates::CAUSE_NEW)
            .bind(admitting)
            .bind(serde_json::to_string(&plan.exclusive_targets()).unwrap_or_else(|_| "[]".into()))
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
            // The admitted runs' promotions, after their creations, and
            // their rows in the queue of AVAILABLE runs, as a round writes
            // them (`promote_ids`). Not looked for when none can be: a
            // small plan's submit is on a pickup's path.
            let available = match admitting {
                false => 0,
                true => {
                    sqlx::query(
                        "INSERT INTO available_run (run_id, node)
                         SELECT id, node FROM task_run WHERE id > $1 AND status = 'AVAILABLE'",
                    )
                    .bind(last_run)
                    .execute(&mut **tx)
                    .await?;
                    sqlx::query(
                        "INSERT INTO run_event (run_id, from_status, to_status, actor, at)
                         SELECT id, 'PENDING', 'AVAILABLE', $2, $3 FROM task_run
                         WHERE id > $1 AND status = 'AVAILABLE'",
                    )
                    .bind(last_run)
                    .bind(SCHEDULER)
                    .bind(now)
                    .execute(&mut **tx)
                    .await?
                    .rows_affected() as usize
                }
            };
            made = Made {
                available: available > 0,
                pending: available < plan.tasks.len(),
            };
        }
        Ok((plan_id, made))
    }
}
