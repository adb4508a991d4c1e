//! Shared test helpers: a fresh database per test on either backend, and
//! the invariant checks (docs/design.md, "Invariants") over the event
//! history.

#![allow(dead_code)]

pub mod cluster;
pub mod invariants;
pub mod process;
pub mod proxy;
pub mod receiver;
pub mod server;
pub mod store;

use std::sync::Arc;
use std::time::Duration;

use baton::bench::scratch::Scratch;
use baton::plan::NewPlan;
use baton::store::Store;
use domain::time::Ts;

/// The PostgreSQL server tests create their databases on. `scripts/test.sh`
/// makes sure one is reachable and exports this variable.
pub fn postgres_admin_url() -> String {
    std::env::var("BATON_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// A fresh, migrated database for one test; dropped afterwards.
pub struct TestDb {
    pub kind: Kind,
    scratch: Option<Scratch>,
}

impl TestDb {
    pub async fn new(kind: Kind) -> Self {
        init_logs();
        let scratch = match kind {
            Kind::Sqlite => Scratch::sqlite().await,
            Kind::Postgres => Scratch::postgres(&postgres_admin_url()).await,
        }
        .unwrap_or_else(|e| panic!("cannot create a {kind:?} test database: {e:#} (run scripts/test.sh, which starts PostgreSQL)"));
        TestDb {
            kind,
            scratch: Some(scratch),
        }
    }

    pub fn url(&self) -> &str {
        &self.scratch.as_ref().expect("live").url
    }

    /// A new store (own pool) on this database.
    pub async fn store(&self) -> Arc<dyn Store> {
        self.scratch
            .as_ref()
            .expect("live")
            .store()
            .await
            .expect("open store")
    }

    /// `n` stores, each with its own pool, as `n` replicas would have.
    pub async fn stores(&self, n: usize) -> Vec<Arc<dyn Store>> {
        self.scratch
            .as_ref()
            .expect("live")
            .stores(n)
            .await
            .expect("open stores")
    }
}

impl TestDb {
    /// Runs one SQL statement on this database outside Baton (to break or
    /// mend it under a running server).
    pub async fn execute(&self, sql: &str) {
        self.try_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// [`TestDb::execute`], answering the database's refusal.
    pub async fn try_execute(&self, sql: &str) -> Result<(), String> {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        match self.kind {
            Kind::Sqlite => {
                let pool = sqlx::SqlitePool::connect(self.url()).await.expect("open");
                sqlx::raw_sql(sql).execute(&pool).await.map(drop)
            }
            Kind::Postgres => {
                let pool = sqlx::PgPool::connect(self.url()).await.expect("open");
                sqlx::raw_sql(sql).execute(&pool).await.map(drop)
            }
        }
        .map_err(|e| e.to_string())
    }

    /// The one number a `SELECT COUNT(*) …` outside Baton answers.
    pub async fn count(&self, sql: &str) -> i64 {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        match self.kind {
            Kind::Sqlite => {
                let pool = sqlx::SqlitePool::connect(self.url()).await.expect("open");
                sqlx::query_scalar(sql).fetch_one(&pool).await
            }
            Kind::Postgres => {
                let pool = sqlx::PgPool::connect(self.url()).await.expect("open");
                sqlx::query_scalar(sql).fetch_one(&pool).await
            }
        }
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Checks every plan's `open_tasks` against its tasks: the count the
    /// finish and skip paths keep must equal the tasks neither DONE nor
    /// SKIPPED, or PIPELINE_COMPLETED would come early or never.
    pub async fn assert_open_task_counts(&self) {
        const COUNTS: &str = "SELECT p.id, p.open_tasks, (SELECT COUNT(*) FROM task t
                LEFT JOIN task_run r ON r.id = t.latest_run_id
                WHERE t.plan_id = p.id AND t.skipped_at IS NULL
                  AND (r.id IS NULL OR r.status <> 'DONE')) AS scanned
            FROM plan p ORDER BY p.id";
        let rows: Vec<(i64, i64, i64)> = match self.kind {
            Kind::Sqlite => {
                let pool = sqlx::SqlitePool::connect(self.url()).await.expect("open");
                sqlx::query_as(COUNTS).fetch_all(&pool).await
            }
            Kind::Postgres => {
                let pool = sqlx::PgPool::connect(self.url()).await.expect("open");
                sqlx::query_as(COUNTS).fetch_all(&pool).await
            }
        }
        .expect("open task counts");
        assert!(!rows.is_empty(), "no plans to check");
        for (plan, kept, scanned) in rows {
            assert_eq!(
                kept, scanned,
                "plan {plan}: open_tasks {kept}, tasks open {scanned}"
            );
        }
    }
}

/// The runs whose row in the queue of AVAILABLE runs (`available_run`,
/// docs/design.md, "Run storage") disagrees with their status: AVAILABLE
/// without a queue row (no claimer would ever see it), or queued while
/// not AVAILABLE, or queued with another node than the run's.
const QUEUE_DISAGREES: &str = "SELECT r.id FROM task_run r WHERE r.status = 'AVAILABLE'
        AND NOT EXISTS (SELECT 1 FROM available_run q WHERE q.run_id = r.id
            AND (q.node = r.node OR (q.node IS NULL AND r.node IS NULL)))
    UNION ALL
    SELECT q.run_id FROM available_run q WHERE NOT EXISTS (
        SELECT 1 FROM task_run r WHERE r.id = q.run_id AND r.status = 'AVAILABLE')
    ORDER BY 1";

/// PostgreSQL's logs of claims and finishes (docs/design.md, "Run
/// storage") against the runs: a RUNNING run no claim lists (the reads of
/// RUNNING runs would miss it), a finished run the finish log does not
/// list exactly once, with its end time and final status, or a logged
/// finish of a run that has not finished.
const LOGS_DISAGREE: &str = "SELECT r.id FROM task_run r WHERE r.status = 'RUNNING'
        AND NOT EXISTS (SELECT 1 FROM claim_log c WHERE r.id = ANY(c.runs))
    UNION ALL
    SELECT r.id FROM task_run r WHERE r.finished_at IS NOT NULL
        AND (SELECT COUNT(*) FROM finish_log l WHERE r.id = ANY(l.runs)
            AND l.finished_at = r.finished_at AND l.status = r.status) <> 1
    UNION ALL
    SELECT x FROM finish_log l, unnest(l.runs) x WHERE NOT EXISTS (
        SELECT 1 FROM task_run r WHERE r.id = x AND r.finished_at IS NOT NULL)
    ORDER BY 1";

impl TestDb {
    /// The runs [`QUEUE_DISAGREES`] and, on PostgreSQL, [`LOGS_DISAGREE`]
    /// find, each list named; `None` when the database cannot answer (a
    /// test that broke it on purpose).
    async fn disagreements(&self) -> Option<Vec<(&'static str, Vec<i64>)>> {
        match self.kind {
            Kind::Sqlite => {
                let pool = sqlx::SqlitePool::connect(self.url()).await.ok()?;
                let queue = sqlx::query_scalar(QUEUE_DISAGREES)
                    .fetch_all(&pool)
                    .await
                    .ok()?;
                Some(vec![(QUEUE_MESSAGE, queue)])
            }
            Kind::Postgres => {
                let pool = sqlx::PgPool::connect(self.url()).await.ok()?;
                let queue = sqlx::query_scalar(QUEUE_DISAGREES).fetch_all(&pool).await;
                let logs = sqlx::query_scalar(LOGS_DISAGREE).fetch_all(&pool).await;
                pool.close().await;
                Some(vec![
                    (QUEUE_MESSAGE, queue.ok()?),
                    (LOGS_MESSAGE, logs.ok()?),
                ])
            }
        }
    }
}

const QUEUE_MESSAGE: &str = "the queue of AVAILABLE runs disagrees with the runs' statuses";
const LOGS_MESSAGE: &str = "the logs of claims and finishes disagree with the runs";

impl Drop for TestDb {
    /// Checks, for every test that passed, that the queue of AVAILABLE runs
    /// and the logs of claims and finishes agree with the runs, then drops
    /// the database.
    fn drop(&mut self) {
        if self.scratch.is_none() {
            return;
        }
        let check = !std::thread::panicking();
        let kind = self.kind;
        let db = TestDb {
            kind,
            scratch: self.scratch.take(),
        };
        // Drop runs outside any runtime we may block: use a private one.
        let disagreements = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let mut db = db;
            let disagreements = match check {
                true => rt.block_on(db.disagreements()),
                false => None,
            };
            if let Some(scratch) = db.scratch.take()
                && kind == Kind::Postgres
            {
                let _ = rt.block_on(scratch.drop_database());
            }
            disagreements
        })
        .join()
        .unwrap_or_default();
        for (what, ids) in disagreements.into_iter().flatten() {
            assert!(ids.is_empty(), "{what} for runs {ids:?}");
        }
    }
}

fn init_logs() {
    if std::env::var_os("TEST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                std::env::var("TEST_LOG").unwrap_or_default(),
            ))
            .with_test_writer()
            .try_init();
    }
}

/// Parses a plan written as JSON; panics on invalid input (tests write
/// valid plans on purpose).
pub fn plan(json: serde_json::Value) -> NewPlan {
    baton::plan::parse_json(json.to_string().as_bytes()).expect("a valid plan")
}

/// How many transitions the history holds, event rows and stamps on the
/// runs' rows alike (`store::engine::reads::history_sql`): for checks that
/// an action refused wrote nothing.
pub const HISTORY_COUNT: &str = "SELECT (SELECT COUNT(*) FROM run_event)
    + (SELECT COUNT(created_seq) + COUNT(available_seq) + COUNT(claimed_seq) + COUNT(ended_seq)
        FROM task_run)";

pub fn now() -> Ts {
    Ts::now()
}

/// Polls `check` until it returns Some, or panics after `within`.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {within:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Instantiates each listed async test case (`async fn(Kind)`) once per
/// backend: `sqlite::name` and `postgres::name`.
#[macro_export]
macro_rules! per_backend {
    ($cases:ident: $($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    super::$cases::$case($crate::common::Kind::Sqlite).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    super::$cases::$case($crate::common::Kind::Postgres).await;
                }
            )*
        }
    };
}

/// Terminates every other client connection to `conn`'s database (as an
/// administrator or a pooler might): Baton's replicas must take it.
pub async fn kill_other_connections(conn: &mut sqlx::PgConnection) {
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()
           AND backend_type = 'client backend'",
    )
    .execute(conn)
    .await
    .unwrap();
}
