//! Fills a database with history for the dashboard's render bench (`baton
//! bench --seed`, `--render`): many finished plans and one large plan
//! still in flight, written with set-based INSERTs (a million runs in
//! seconds, not the minutes the scheduler would take to run them).
//!
//! Every run is a plausible one — created, started and finished in order,
//! with an event and the columns the pages read — but none of it ran.

use std::time::Instant;

use anyhow::Context;
use sqlx::postgres::PgConnection;
use sqlx::sqlite::SqliteConnection;
use sqlx::{Connection, Executor};

use domain::time::Ts;

/// What to seed.
#[derive(Debug, Clone, Copy)]
pub struct SeedSpec {
    /// Finished plans, spread over the past day.
    pub plans: i64,
    /// Tasks (one run each) per finished plan.
    pub tasks: i64,
    /// Tasks of the one plan still in flight, seeded last.
    pub big_plan_tasks: i64,
}

/// What was seeded.
#[derive(Debug, Clone, Copy)]
pub struct Seeded {
    pub runs: i64,
    /// The id of the large plan in flight.
    pub big_plan: i64,
    pub seconds: f64,
}

/// Plans per INSERT round, so progress shows and no statement is huge.
const CHUNK: i64 = 10_000;

/// The SQL that differs between the backends.
struct Dialect {
    postgres: bool,
}

impl Dialect {
    /// `s(i)`: the integers `0..n`.
    fn series(&self, n: i64) -> String {
        if self.postgres {
            format!(
                "s(i) AS (SELECT generate_series(CAST(0 AS BIGINT), {}))",
                n - 1
            )
        } else {
            format!(
                "RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < {})",
                n - 1
            )
        }
    }

    /// A timestamp column value from Unix microseconds.
    fn ts(&self, micros: &str) -> String {
        if self.postgres {
            format!("to_timestamp(({micros}) / 1000000.0)")
        } else {
            format!("({micros})")
        }
    }

    /// What a finishing statement adds on PostgreSQL: its runs in the
    /// finish log (docs/design.md, "Run storage"), here for the seeded
    /// runs with ids in `first..=last` that finished.
    fn finish_logged(&self, first: &str, last: &str) -> Option<String> {
        self.postgres.then(|| {
            format!(
                "INSERT INTO finish_log (finished_at, status, runs)
                 SELECT finished_at, status, array_agg(id ORDER BY id) FROM task_run
                 WHERE id BETWEEN {first} AND {last} AND finished_at IS NOT NULL
                 GROUP BY finished_at, status"
            )
        })
    }

    fn bool(&self, value: bool) -> &'static str {
        match (self.postgres, value) {
            (true, true) => "TRUE",
            (true, false) => "FALSE",
            (false, true) => "1",
            (false, false) => "0",
        }
    }
}

/// A connection to either backend: seeding needs raw SQL, not the store.
enum Conn {
    Postgres(PgConnection),
    Sqlite(SqliteConnection),
}

impl Conn {
    async fn max_id(&mut self, table: &str) -> anyhow::Result<i64> {
        let sql = format!("SELECT CAST(COALESCE(MAX(id), 0) AS BIGINT) FROM {table}");
        let sql = sqlx::AssertSqlSafe(sql);
        Ok(match self {
            Conn::Postgres(c) => sqlx::query_scalar(sql).fetch_one(c).await?,
            Conn::Sqlite(c) => sqlx::query_scalar(sql).fetch_one(c).await?,
        })
    }

    /// Runs `statements` in one transaction.
    async fn batch(&mut self, statements: Vec<String>) -> anyhow::Result<()> {
        match self {
            Conn::Postgres(c) => {
                let mut tx = c.begin().await?;
                for sql in statements {
                    tx.execute(sqlx::AssertSqlSafe(sql)).await?;
                }
                tx.commit().await?;
            }
            Conn::Sqlite(c) => {
                let mut tx = c.begin().await?;
                for sql in statements {
                    tx.execute(sqlx::AssertSqlSafe(sql)).await?;
                }
                tx.commit().await?;
            }
        }
        Ok(())
    }
}

/// Seeds the (migrated) database at `url`; `progress` hears the number of
/// runs written so far after each round.
pub async fn seed(
    url: &str,
    spec: SeedSpec,
    mut progress: impl FnMut(i64),
) -> anyhow::Result<Seeded> {
    let started = Instant::now();
    let postgres = url.starts_with("postgres");
    let dialect = Dialect { postgres };
    let mut conn = if postgres {
        Conn::Postgres(
            PgConnection::connect(url)
                .await
                .with_context(|| format!("cannot connect to {}", crate::store::redact(url)))?,
        )
    } else {
        Conn::Sqlite(
            SqliteConnection::connect(url)
                .await
                .with_context(|| format!("cannot open {url}"))?,
        )
    };
    let first_plan = conn.max_id("plan").await?;
    // Task and run ids coincide (one run per task), above both maxima.
    let run_base = conn
        .max_id("task_run")
        .await?
        .max(conn.max_id("task").await?);
    let now = Ts::now().micros();
    // Finished plans one every ~0.86 s over the past day (100,000 plans),
    // newest last, so the last hour holds thousands of runs for the chart.
    let spacing = 86_400_000_000 / spec.plans.max(1);
    let mut done = 0;
    while done < spec.plans {
        let chunk = Chunk {
            first_plan: first_plan + done,
            first_run: run_base + done * spec.tasks,
            plans: CHUNK.min(spec.plans - done),
            plans_after: spec.plans - done,
        };
        conn.batch(finished_plans_sql(
            &dialect, spec.tasks, chunk, now, spacing,
        ))
        .await?;
        done += chunk.plans;
        progress(done * spec.tasks);
    }
    let big_plan = first_plan + spec.plans + 1;
    let big_first_run = run_base + spec.plans * spec.tasks;
    conn.batch(big_plan_sql(
        &dialect,
        spec.big_plan_tasks,
        big_plan,
        big_first_run,
        now,
    ))
    .await?;
    let mut finish = vec!["ANALYZE".to_owned()];
    if postgres {
        // Ids were given explicitly: move the sequences past them.
        for table in ["plan", "task", "task_run", "run_event"] {
            finish.insert(
                0,
                format!(
                    "SELECT setval(pg_get_serial_sequence('{table}', 'id'), \
                     (SELECT MAX(id) FROM {table}))"
                ),
            );
        }
    }
    for sql in finish {
        conn.batch(vec![sql]).await?;
    }
    Ok(Seeded {
        runs: spec.plans * spec.tasks + spec.big_plan_tasks,
        big_plan,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// One round of finished plans.
#[derive(Debug, Clone, Copy)]
struct Chunk {
    /// Plan ids start after this one.
    first_plan: i64,
    /// Task and run ids start after this one.
    first_run: i64,
    plans: i64,
    /// Plans from this chunk's first to the newest (sets the age).
    plans_after: i64,
}

/// A chunk of finished plans of `tasks` tasks each, one run per task;
/// plan j of the chunk was created `(plans_after - j) * spacing` µs ago and
/// its tasks ran 100 ms apart. One run in 97 failed. Each run has two
/// events (submitted, finished).
fn finished_plans_sql(d: &Dialect, tasks: i64, c: Chunk, now: i64, spacing: i64) -> Vec<String> {
    let Chunk {
        first_plan,
        first_run,
        plans,
        plans_after,
    } = c;
    // Over runs, `i` numbers the chunk's runs: plan i / tasks, task i % tasks.
    let run_id = format!("{first_run} + i + 1");
    let run_plan = format!("{first_plan} + i / {tasks} + 1");
    let run_created =
        format!("{now} - ({plans_after} - i / {tasks}) * {spacing} + (i % {tasks}) * 100000");
    let failed = "(i % 97 = 96)";
    // A third of the failures are deadlocks, for the error search.
    let error = "CASE WHEN i % 3 = 0 THEN 'ERROR: deadlock detected (seeded)'
        ELSE 'exited with code 1: seeded failure' END";
    // A plan's open tasks are its FAILED ones: the runs numbered
    // 96 mod 97 among its `tasks` runs.
    let plan_sql = format!(
        "WITH {series} INSERT INTO plan (id, name, description, parallel_limit, created_at,
            created_by, webhooks, open_tasks)
         SELECT {first_plan} + i + 1, 'seed-' || CAST({first_plan} + i + 1 AS TEXT),
            'seeded history', NULL, {created}, {submitter}, '[]',
            ((i + 1) * {tasks}) / 97 - (i * {tasks}) / 97 FROM s",
        series = d.series(plans),
        created = d.ts(&format!("{now} - ({plans_after} - i) * {spacing}")),
        submitter = submitter(&format!("{first_plan} + i + 1")),
    );
    let task_sql = format!(
        "WITH {series} INSERT INTO task (id, plan_id, name, target, exclusive, version, run_at,
            node, timeout_ms, max_attempts, heartbeat_interval_ms, heartbeat_timeout_ms, executor,
            latest_run_id, skipped_at, skipped_by, reassign_after_ms)
         SELECT {run_id}, {run_plan}, 'task-' || CAST(i % {tasks} AS TEXT),
            {target}, {t}, CAST(i % {tasks} AS TEXT), NULL, NULL,
            3600000, 1, NULL, NULL, '{SLEEP}', {run_id}, NULL, NULL, NULL FROM s",
        series = d.series(plans * tasks),
        t = d.bool(true),
        target = target(&run_id),
    );
    let run_sql = format!(
        "WITH {series} INSERT INTO task_run (id, task_id, plan_id, attempt, status, target,
            exclusive, version, node, timeout_ms, max_attempts, run_at, replica_id, created_at,
            started_at, finished_at, last_heartbeat_at, heartbeat_deadline, deadline,
            waiting_cause, result_code, error, reassign_after_ms)
         SELECT {run_id}, {run_id}, {run_plan}, 1,
            CASE WHEN {failed} THEN 'FAILED' ELSE 'DONE' END,
            {target}, {t}, CAST(i % {tasks} AS TEXT), NULL, 3600000,
            1, NULL, {replica}, {created}, {started}, {finished}, {started}, NULL, NULL, NULL,
            CASE WHEN {failed} THEN 1 ELSE 0 END, CASE WHEN {failed} THEN {error} ELSE NULL END,
            NULL FROM s",
        series = d.series(plans * tasks),
        t = d.bool(true),
        target = target(&run_id),
        replica = replica(&run_id),
        created = d.ts(&run_created),
        started = d.ts(&format!("{run_created} + 20000")),
        finished = d.ts(&format!("{run_created} + 80000")),
    );
    // Each run's first and last events: submitted by its plan's
    // submitter, finished by its replica.
    let created_sql = format!(
        "WITH {series} INSERT INTO run_event (run_id, from_status, to_status, replica_id, actor,
            at, detail)
         SELECT {run_id}, NULL, 'PENDING', NULL, {submitter}, {created}, 'submitted' FROM s",
        series = d.series(plans * tasks),
        submitter = submitter(&run_plan),
        created = d.ts(&run_created),
    );
    let event_sql = format!(
        "WITH {series} INSERT INTO run_event (run_id, from_status, to_status, replica_id, actor,
            at, detail)
         SELECT {run_id}, 'RUNNING', CASE WHEN {failed} THEN 'FAILED' ELSE 'DONE' END, {replica},
            {replica}, {finished}, CASE WHEN {failed} THEN {error} ELSE NULL END FROM s",
        series = d.series(plans * tasks),
        replica = replica(&run_id),
        finished = d.ts(&format!("{run_created} + 80000")),
    );
    let logged = d.finish_logged(
        &format!("{first_run} + 1"),
        &format!("{first_run} + {}", plans * tasks),
    );
    [plan_sql, task_sql, run_sql, created_sql, event_sql]
        .into_iter()
        .chain(logged)
        .collect()
}

/// Who submitted plan `plan` (an SQL expression): `ops-oncall` one plan in
/// a thousand, `alice` one in ten, else `seed` — a rare and a common actor
/// for the runs search.
fn submitter(plan: &str) -> String {
    format!(
        "CASE WHEN ({plan}) % 1000 = 3 THEN 'ops-oncall' WHEN ({plan}) % 10 = 0 THEN 'alice'
            ELSE 'seed' END"
    )
}

/// The target of run `run` (an SQL expression over the series `i`): 200
/// shards in turn, and on a fresh database the oldest 2,000 runs on
/// `db/legacy-0` and `-1`, targets absent from recent history — the runs
/// search's slowest case.
fn target(run: &str) -> String {
    format!(
        "CASE WHEN ({run}) <= 2000 THEN 'db/legacy-' || CAST(({run}) % 2 AS TEXT)
            ELSE 'db/shard-' || CAST(i % 200 AS TEXT) END"
    )
}

/// The replica that ran run `run` (an SQL expression): three busy ones,
/// `r-retired` with one run in 2,000 — a rare replica for the search — and
/// on a fresh database `r-legacy` with the oldest 2,000.
fn replica(run: &str) -> String {
    format!(
        "CASE WHEN ({run}) <= 2000 THEN 'r-legacy' WHEN ({run}) % 2000 = 7 THEN 'r-retired'
            ELSE 'r-seed-' || CAST(({run}) % 3 AS TEXT) END"
    )
}

/// Every seeded task sleeps 0 s, should anyone run it.
const SLEEP: &str = r#"{"kind":"sleep","duration":0}"#;

/// The plan in flight: `spec.big_plan_tasks` tasks over 50 targets — 70 %
/// DONE, 2 % FAILED, the rest PENDING behind a busy target.
fn big_plan_sql(d: &Dialect, n: i64, plan: i64, run_base: i64, now: i64) -> Vec<String> {
    let id = format!("{run_base} + i + 1");
    let status = format!(
        "CASE WHEN i < {done} THEN 'DONE' WHEN i < {failed} THEN 'FAILED' ELSE 'PENDING' END",
        done = n * 70 / 100,
        failed = n * 72 / 100,
    );
    let finished = format!(
        "CASE WHEN i < {} THEN {} ELSE NULL END",
        n * 72 / 100,
        d.ts(&format!("{now} - 600000000 + i * 500000"))
    );
    let started = format!(
        "CASE WHEN i < {} THEN {} ELSE NULL END",
        n * 72 / 100,
        d.ts(&format!("{now} - 600000000 + i * 500000 - 300000"))
    );
    let plan_sql = format!(
        "INSERT INTO plan (id, name, description, parallel_limit, created_at, created_by, webhooks,
            open_tasks)
         VALUES ({plan}, 'seed-big-release', 'A {n}-task plan in flight', 8, {created}, 'seed', '[]',
            {open})",
        created = d.ts(&format!("{now} - 900000000")),
        open = n - n * 70 / 100,
    );
    let task_sql = format!(
        "WITH {series} INSERT INTO task (id, plan_id, name, target, exclusive, version, run_at, node,
            timeout_ms, max_attempts, heartbeat_interval_ms, heartbeat_timeout_ms, executor,
            latest_run_id, skipped_at, skipped_by, reassign_after_ms)
         SELECT {id}, {plan}, 'step-' || CAST(i AS TEXT), 'db/big-' || CAST(i % 50 AS TEXT), {t},
            CAST(i AS TEXT), NULL, NULL, 3600000, 1, NULL, NULL,
            '{SLEEP}', {id}, NULL, NULL, NULL FROM s",
        series = d.series(n),
        t = d.bool(true),
    );
    let run_sql = format!(
        "WITH {series} INSERT INTO task_run (id, task_id, plan_id, attempt, status, target, exclusive,
            version, node, timeout_ms, max_attempts, run_at, replica_id, created_at, started_at,
            finished_at, last_heartbeat_at, heartbeat_deadline, deadline, waiting_cause, result_code,
            error, reassign_after_ms)
         SELECT {id}, {id}, {plan}, 1, {status}, 'db/big-' || CAST(i % 50 AS TEXT), {t},
            CAST(i AS TEXT), NULL, 3600000, 1, NULL,
            CASE WHEN i < {ended} THEN 'r-seed' ELSE NULL END, {created}, {started}, {finished},
            {started}, NULL, NULL,
            CASE WHEN i >= {ended} THEN 'plan limit 8 reached' ELSE NULL END,
            NULL, CASE WHEN {status} = 'FAILED' THEN 'exited with code 2: seeded failure' ELSE NULL END,
            NULL FROM s",
        series = d.series(n),
        t = d.bool(true),
        ended = n * 72 / 100,
        created = d.ts(&format!("{now} - 900000000")),
    );
    let logged = d.finish_logged(&format!("{run_base} + 1"), &format!("{run_base} + {n}"));
    [plan_sql, task_sql, run_sql]
        .into_iter()
        .chain(logged)
        .collect()
}
