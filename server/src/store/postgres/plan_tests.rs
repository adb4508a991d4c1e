//! The plans PostgreSQL picks for the batched claim, finish and heartbeat
//! when its statistics are stale, as they are after every burst:
//! `task_run`'s status mix changes far faster than autovacuum re-analyzes
//! it.
//!
//! These tests count rows read in `EXPLAIN ANALYZE`, not time, so a slow
//! machine cannot fail them and a quadratic plan cannot pass.

use serde_json::Value;
use sqlx::Row;

use super::{
    BEGIN_INDEX_ONLY, CLAIM, CLAIM_TRIED, FINISH, PROMOTE, PgStore, Planned, ROUND_BEGIN,
    ROUND_CLAIM, ROUND_READS, RUN_HEARTBEAT,
};
use crate::bench::scratch::Scratch;
use crate::store::Store;

const HISTORY: i64 = 200;
/// Runs in the live status under test.
const LIVE: i64 = 3_000;
const BATCH: i64 = 300;
const REPLICA: &str = "r-test";

/// A database whose last ANALYZE saw `others` live runs on other replicas
/// besides finished ones, and which now also holds [`LIVE`] runs in `live`
/// status (RUNNING ones on [`REPLICA`]): what a burst leaves behind.
async fn stale_statistics(scratch: &Scratch, live: &str, others: i64) -> PgStore {
    let store = PgStore::connect(&scratch.url).await.expect("connect");
    store.migrate().await.expect("migrate");
    let statements = [
        // Autovacuum must not refresh the statistics before the statement
        // under test runs.
        "ALTER TABLE task_run SET (autovacuum_enabled = false);
         ALTER TABLE available_run SET (autovacuum_enabled = false)"
            .to_owned(),
        seed(1, HISTORY, "DONE", "NULL"),
        seed(HISTORY + 1, others, live, "'r-other-' || (g % 4)"),
        "VACUUM ANALYZE task_run, available_run".to_owned(),
        seed(first_live(others), LIVE, live, &format!("'{REPLICA}'")),
    ];
    for sql in statements {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&store.pool)
            .await
            .expect("seed");
    }
    store
}

/// A database whose `tables` no ANALYZE has seen (autovacuum off), holding
/// what `seed` writes: a bench's full queue, or a first burst.
async fn never_analyzed(scratch: &Scratch, tables: &[&str], seed: String) -> PgStore {
    let store = PgStore::connect(&scratch.url).await.expect("connect");
    store.migrate().await.expect("migrate");
    let off: String = tables
        .iter()
        .map(|t| format!("ALTER TABLE {t} SET (autovacuum_enabled = false);\n"))
        .collect();
    sqlx::raw_sql(sqlx::AssertSqlSafe(off + &seed))
        .execute(&store.pool)
        .await
        .expect("seed");
    store
}

/// Statements that add `count` runs in `status` from id `first` on, each
/// with its own plan and task, on `replica` (an SQL expression); AVAILABLE
/// ones queued for claimers.
fn seed(first: i64, count: i64, status: &str, replica: &str) -> String {
    format!(
            "INSERT INTO plan (id, name, created_at, created_by)
                SELECT g, 'p' || g, now(), 'test' FROM generate_series({first}, {last}) g;
            INSERT INTO task (id, plan_id, name, target, exclusive, timeout_ms, max_attempts, executor)
                SELECT g, g, 't', 'db/' || (g % 20), false, 60000, 1, '{{\"kind\":\"sleep\",\"duration\":\"0s\"}}'
                FROM generate_series({first}, {last}) g;
            INSERT INTO task_run (id, task_id, plan_id, attempt, status, target, exclusive,
                    timeout_ms, max_attempts, created_at, finished_at, replica_id)
                SELECT g, g, g, 1, '{status}', 'db/' || (g % 20), false, 60000, 1, now(),
                    CASE WHEN '{status}' = 'DONE' THEN now() END,
                    CASE WHEN '{status}' = 'RUNNING' THEN {replica} END
                FROM generate_series({first}, {last}) g;
            INSERT INTO available_run (run_id)
                SELECT g FROM generate_series({first}, {last}) g WHERE '{status}' = 'AVAILABLE';",
        last = first + count - 1,
    )
}

fn first_live(others: i64) -> i64 {
    HISTORY + others + 1
}

/// Every node of a JSON plan, depth first.
fn nodes(plan: &Value) -> Vec<&Value> {
    let mut all = vec![plan];
    if let Some(children) = plan["Plans"].as_array() {
        for child in children {
            all.extend(nodes(child));
        }
    }
    all
}

fn count(node: &Value, field: &str) -> i64 {
    node[field].as_f64().unwrap_or(0.0) as i64
}

/// Checks an `EXPLAIN (ANALYZE, FORMAT JSON)` of one batched UPDATE: it
/// changed `changed` runs, compared no pairs of rows, and no scan of
/// `task_run`, of the queue of AVAILABLE runs or of the batch's arrays
/// read more than `max_read` rows in
/// all its loops. With `hashed`, the batch (an `UNNEST`, a Function Scan)
/// must not be joined by a nested loop at all: whichever side the planner
/// puts outside, that order comes from estimates, and the wrong one
/// rescans the batch once per live run.
fn assert_linear(text: &str, changed: i64, max_read: i64, hashed: bool) {
    let explained: Value = serde_json::from_str(text).expect("plan json");
    let all = nodes(&explained[0]["Plan"]);
    let updated = all
        .iter()
        .find(|n| n["Node Type"] == "ModifyTable" && n["Operation"] == "Update")
        .map(|n| count(n, "Actual Rows"))
        .expect("an UPDATE node");
    assert_eq!(
        updated, changed,
        "the statement changes a full batch:\n{text}"
    );
    for node in &all {
        assert_eq!(
            count(node, "Rows Removed by Join Filter"),
            0,
            "no join compares runs pairwise:\n{text}"
        );
        if node["Relation Name"] == "task_run"
            || node["Relation Name"] == "available_run"
            || node["Node Type"] == "Function Scan"
        {
            let read = count(node, "Actual Rows") * count(node, "Actual Loops");
            assert!(
                read <= max_read,
                "a scan read {read} rows for a batch of {BATCH} out of {LIVE} live runs \
                 (at most {max_read} allowed):\n{text}"
            );
        }
        if hashed && node["Node Type"] == "Nested Loop" {
            let children = node["Plans"].as_array().map(Vec::as_slice).unwrap_or(&[]);
            assert!(
                !children.iter().any(|c| c["Node Type"] == "Function Scan"),
                "the batch is joined by a nested loop:\n{text}"
            );
        }
    }
}

/// Ids of a batch of the seeded live runs, spread over them, as an array
/// literal.
fn batch_ids(others: i64) -> String {
    let ids: Vec<String> = (0..BATCH)
        .map(|i| (first_live(others) + i * (LIVE / BATCH)).to_string())
        .collect();
    format!("'{{{}}}'", ids.join(","))
}

/// `EXPLAIN ANALYZE` of `statement` in a transaction begun as the store
/// begins it, then rolled back, under the plan cache `mode`: a custom plan
/// (for the batch at hand) or the generic one PostgreSQL may cache after
/// five runs (for a batch of unknown length). `params` are the parameter
/// types, `args` SQL literals for them.
async fn explain(
    store: &PgStore,
    statement: &Planned,
    params: &str,
    args: &str,
    mode: &str,
) -> String {
    let mut tx = store.begin(statement.begin).await.expect("begin");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "PREPARE under_test ({params}) AS {};
         SET LOCAL plan_cache_mode = {mode}",
        statement.sql
    )))
    .execute(&mut *tx)
    .await
    .expect("prepare");
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE under_test ({args})"
    )))
    .fetch_one(&mut *tx)
    .await
    .expect("explain");
    // EXPLAIN's json column travels as text; sqlx is built without its
    // json feature, which nothing else needs.
    let text: String = row.try_get_unchecked(0).expect("plan text");
    // PREPARE belongs to the connection, not the transaction.
    sqlx::raw_sql("DEALLOCATE under_test")
        .execute(&mut *tx)
        .await
        .expect("deallocate");
    tx.rollback().await.expect("rollback");
    text
}

/// `EXPLAIN ANALYZE` (JSON) of `sql`, which takes no parameters, in a
/// transaction begun with `begin`, then rolled back.
async fn explain_unprepared(store: &PgStore, begin: &'static str, sql: &str) -> String {
    explain_unprepared_after(store, begin, "", sql).await
}

/// [`explain_unprepared`] with `settings` (statements, or nothing) run
/// after `begin`.
async fn explain_unprepared_after(
    store: &PgStore,
    begin: &'static str,
    settings: &str,
    sql: &str,
) -> String {
    let mut tx = store.begin(begin).await.expect("begin");
    if !settings.is_empty() {
        sqlx::raw_sql(sqlx::AssertSqlSafe(settings.to_owned()))
            .execute(&mut *tx)
            .await
            .expect("settings");
    }
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) {sql}"
    )))
    .fetch_one(&mut *tx)
    .await
    .expect("explain");
    let text = row.try_get_unchecked::<String, _>(0).expect("plan text");
    tx.rollback().await.expect("rollback");
    text
}

const BOTH_PLANS: [&str; 2] = ["force_custom_plan", "force_generic_plan"];

#[tokio::test]
async fn a_claim_reads_only_the_runs_it_claims_under_stale_statistics() {
    let scratch = Scratch::postgres_for_tests().await;
    // The last ANALYZE saw nothing AVAILABLE at all.
    let store = stale_statistics(&scratch, "AVAILABLE", 0).await;
    let args = format!("'{REPLICA}', ARRAY[]::text[], {BATCH}, now(), 10000");
    let mut plans = Vec::new();
    // The claim with its lock tried in its BEGIN (which takes it here:
    // nothing else holds it), and the claim after a wait for the lock.
    for claim in [&CLAIM_TRIED, &CLAIM] {
        for mode in BOTH_PLANS {
            let types = "text, text[], bigint, timestamptz, bigint";
            plans.push(explain(&store, claim, types, &args, mode).await);
        }
    }
    scratch.drop_database().await.expect("drop");

    // Each claim takes the first BATCH AVAILABLE runs off the queue and
    // looks each up once (joining `task` by key in a nested loop).
    for text in plans {
        assert_linear(&text, BATCH, BATCH, false);
    }
}

/// Live runs of other replicas when the statistics were taken: without
/// nested loops ruled out, the finish's and heartbeat's generic plans join
/// the batch by a nested loop.
const OTHERS: i64 = 2_000;

#[tokio::test]
async fn a_finish_reads_each_run_once_under_stale_statistics() {
    let scratch = Scratch::postgres_for_tests().await;
    let store = stale_statistics(&scratch, "RUNNING", OTHERS).await;
    let args = format!(
        "'{REPLICA}', {}, array_fill('DONE'::text, ARRAY[{BATCH}]), \
         array_fill(0::bigint, ARRAY[{BATCH}]), array_fill(NULL::text, ARRAY[{BATCH}]), now()",
        batch_ids(OTHERS)
    );
    let mut plans = Vec::new();
    for mode in BOTH_PLANS {
        let types = "text, bigint[], text[], bigint[], text[], timestamptz";
        plans.push(explain(&store, &FINISH, types, &args, mode).await);
    }
    scratch.drop_database().await.expect("drop");

    // Linear: at worst every RUNNING run is read once, to be hashed.
    for text in plans {
        assert_linear(&text, BATCH, OTHERS + LIVE, true);
    }
}

#[tokio::test]
async fn a_run_heartbeat_reads_each_run_once_under_stale_statistics() {
    let scratch = Scratch::postgres_for_tests().await;
    let store = stale_statistics(&scratch, "RUNNING", OTHERS).await;
    let args = format!(
        "'{REPLICA}', {}, array_fill(30000::bigint, ARRAY[{BATCH}]), now()",
        batch_ids(OTHERS)
    );
    let mut plans = Vec::new();
    for mode in BOTH_PLANS {
        let types = "text, bigint[], bigint[], timestamptz";
        plans.push(explain(&store, &RUN_HEARTBEAT, types, &args, mode).await);
    }
    scratch.drop_database().await.expect("drop");

    for text in plans {
        assert_linear(&text, BATCH, OTHERS + LIVE, true);
    }
}

/// A round's writes look up each run they move: the promotion by the
/// PENDING index, and the runs it claims for its own replica the same way,
/// each joined to its task by key.
#[tokio::test]
async fn a_round_looks_up_each_run_it_writes_under_stale_statistics() {
    let scratch = Scratch::postgres_for_tests().await;
    // The last ANALYZE saw nothing PENDING: the PENDING index looks empty.
    let store = stale_statistics(&scratch, "PENDING", 0).await;
    let ids = batch_ids(0);
    let mut plans = Vec::new();
    for (statement, types, args) in [
        (
            &PROMOTE,
            "bigint[], timestamptz, text, text",
            format!("{ids}, now(), 'plan_tests', 'available'"),
        ),
        (
            &ROUND_CLAIM,
            "text, bigint[], timestamptz, timestamptz, bigint",
            format!("'{REPLICA}', {ids}, now(), now(), 10000"),
        ),
    ] {
        for mode in BOTH_PLANS {
            plans.push(explain(&store, statement, types, &args, mode).await);
        }
    }
    scratch.drop_database().await.expect("drop");

    for text in plans {
        assert_linear(&text, BATCH, BATCH, false);
        assert_probed_per_run(&text);
    }
}

/// Rows alone cannot tell a probe per id from a walk of the whole PENDING
/// index per id (both return BATCH rows); the pages read can. A probe
/// reads the index's root and one leaf, and the run's heap page: about 3
/// per run. Walking the index per id read twelve or more per run here.
fn assert_probed_per_run(text: &str) {
    let explained: Value = serde_json::from_str(text).expect("plan json");
    for node in nodes(&explained[0]["Plan"]) {
        let scan = node["Node Type"]
            .as_str()
            .is_some_and(|t| t.ends_with("Scan"));
        if scan && node["Relation Name"] == "task_run" {
            let pages = count(node, "Shared Hit Blocks") + count(node, "Shared Read Blocks");
            assert!(
                pages <= 5 * BATCH,
                "writing {BATCH} of {LIVE} PENDING runs read {pages} pages of task_run \
                 and its indexes (at most {} allowed):\n{text}",
                5 * BATCH
            );
        }
    }
}

async fn synchronous_commit(tx: &mut sqlx::PgConnection) -> String {
    sqlx::query_scalar("SELECT current_setting('synchronous_commit')")
        .fetch_one(tx)
        .await
        .expect("setting")
}

/// A round commits without waiting for the disk (`ROUND_BEGIN`) unless it
/// claimed runs: those execute, and must still be claimed after a crash.
#[tokio::test]
async fn a_round_that_claims_waits_for_the_disk() {
    let scratch = Scratch::postgres_for_tests().await;
    let store = stale_statistics(&scratch, "PENDING", 0).await;
    let mut tx = store.begin(ROUND_BEGIN).await.expect("begin");
    assert_eq!(synchronous_commit(&mut tx).await, "off");
    let claim = |ids: Vec<i64>| {
        sqlx::query(ROUND_CLAIM.sql)
            .bind(REPLICA)
            .bind(ids)
            .bind(domain::time::Ts::now())
            .bind(domain::time::Ts::now())
            .bind(10_000_i64)
    };
    // Nothing moved (no such run): the round's commit stays as it was.
    let moved = claim(vec![-1]).fetch_all(&mut *tx).await.expect("claim");
    assert!(moved.is_empty());
    assert_eq!(synchronous_commit(&mut tx).await, "off");
    let first = first_live(0);
    let moved = claim(vec![first, first + 1])
        .fetch_all(&mut *tx)
        .await
        .expect("claim");
    assert_eq!(moved.len(), 2);
    assert_eq!(synchronous_commit(&mut tx).await, "on");
    tx.rollback().await.expect("rollback");
    scratch.drop_database().await.expect("drop");
}

/// A round's reads run under its `BEGIN`'s settings (`ROUND_BEGIN`), which
/// rule out sequential scans. Where one is left anyway (the target
/// settings have no index worth scanning) its cost is 10^10, past every
/// JIT threshold; with JIT on, each round would compile its plan first
/// (26 ms against 0.2 ms, seen here).
#[tokio::test]
async fn a_rounds_reads_are_never_jit_compiled() {
    let scratch = Scratch::postgres_for_tests().await;
    let store = stale_statistics(&scratch, "PENDING", 0).await;
    sqlx::raw_sql("INSERT INTO target_setting (target, capacity, updated_by, updated_at) VALUES ('db/1', 2, 'test', now())")
        .execute(&store.pool)
        .await
        .expect("a target setting");
    // The PENDING runs and the brakes and holders, read as one statement.
    let text = explain_unprepared(&store, ROUND_BEGIN, ROUND_READS).await;
    scratch.drop_database().await.expect("drop");

    let explained: Value = serde_json::from_str(&text).expect("plan json");
    assert!(
        explained[0].get("JIT").is_none(),
        "a round's read was JIT-compiled:\n{text}"
    );
    let rows = count(&explained[0]["Plan"], "Actual Rows");
    assert!(rows > 0, "the read found nothing to read:\n{text}");
}

/// A table filled since its last ANALYZE (here: never analyzed, as a
/// fresh database after its first burst) is estimated at 0.5 % of its
/// rows per equality. With 60,000 runs queued and none PENDING, a round's
/// read of PENDING runs expected hundreds of them and was shared among
/// two parallel workers, which the server forked for every round (10–25
/// ms each in `baton bench`, seen here with this seed as well). The hot
/// transactions launch none (`index_only_sql`).
#[tokio::test]
async fn a_rounds_reads_launch_no_parallel_workers_before_the_first_analyze() {
    let scratch = Scratch::postgres_for_tests().await;
    let store = never_analyzed(
        &scratch,
        &["task_run", "available_run", "plan"],
        seed(1, 60_000, "AVAILABLE", "NULL"),
    )
    .await;
    let text = explain_unprepared(&store, ROUND_BEGIN, ROUND_READS).await;
    // The same read in a round's transaction that allows workers again.
    let allowed = explain_unprepared_after(
        &store,
        ROUND_BEGIN,
        "SET LOCAL max_parallel_workers_per_gather = 2",
        ROUND_READS,
    )
    .await;
    scratch.drop_database().await.expect("drop");

    assert!(
        !parallel_nodes(&allowed).is_empty(),
        "the trap is gone (no parallel plan even with workers allowed): this case proves nothing\n{allowed}"
    );
    let parallel = parallel_nodes(&text);
    assert!(
        parallel.is_empty(),
        "a round's read went parallel ({parallel:?}):\n{text}"
    );
}

/// The nodes of an `EXPLAIN (FORMAT JSON)` that share their work among
/// parallel workers (a `Gather` and what it gathers).
fn parallel_nodes(text: &str) -> Vec<String> {
    let explained: Value = serde_json::from_str(text).expect("plan json");
    nodes(&explained[0]["Plan"])
        .into_iter()
        .filter(|n| n.get("Workers Planned").is_some() || n["Parallel Aware"] == true)
        .filter_map(|n| n["Node Type"].as_str().map(str::to_owned))
        .collect()
}

/// Outside a round, the planner's own choice can cost past the JIT
/// threshold too: the replica list (the promoter's node labels) before
/// its first ANALYZE estimates a few hundred replicas, each counting its
/// runs. With JIT on it compiled on every execution, 28 ms against under
/// 1 ms at the start of a bench; every connection now has JIT off.
///
/// Since the RUNNING runs are read through the claim log (migration 0030)
/// and counted in one pass for all replicas, the list no longer costs
/// past the default threshold on a fresh database (about 230 on this
/// seed), so the connection's threshold is lowered under its cost: a
/// connection with JIT on would compile it.
#[tokio::test]
async fn the_replica_list_is_never_jit_compiled() {
    let scratch = Scratch::postgres_for_tests().await;
    let store = never_analyzed(
        &scratch,
        &["task_run", "replica"],
        seed(1, 50_000, "PENDING", "NULL"),
    )
    .await;
    let mut conn = store.pool.acquire().await.expect("a connection");
    sqlx::query("SET jit_above_cost = 100")
        .execute(&mut *conn)
        .await
        .expect("threshold");
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) {}",
        crate::store::engine::reads::rows::REPLICA_LIST
    )))
    .fetch_one(&mut *conn)
    .await
    .expect("explain");
    let text = row.try_get_unchecked::<String, _>(0).expect("plan text");
    let threshold: f64 = sqlx::query_scalar("SELECT current_setting('jit_above_cost')::float8")
        .fetch_one(&mut *conn)
        .await
        .expect("jit_above_cost");
    drop(conn);
    scratch.drop_database().await.expect("drop");

    let explained: Value = serde_json::from_str(&text).expect("plan json");
    let cost = explained[0]["Plan"]["Total Cost"].as_f64().expect("a cost");
    assert!(
        cost > threshold,
        "the trap is gone (cost {cost} under {threshold}): this case proves nothing\n{text}"
    );
    assert!(
        explained[0].get("JIT").is_none(),
        "the replica list was JIT-compiled:\n{text}"
    );
}

/// A backend keeps up to 16 relation locks in its fast-path slots; past
/// them each lock goes through the shared lock table (a hash lookup under
/// a partition lock, taken and given back in every transaction). A claim
/// locks `task_run` and each of its indexes, `task` and two of its
/// indexes, and the sequence its stamps are numbered from. Claims are
/// serialised across
/// replicas (the claim lock), so a claim's time is the whole cluster's
/// critical path. Migration 0016 brought it down to 15 locks; this fails
/// when a new index on `task_run` or `task` pushes it out again.
#[tokio::test]
async fn a_claims_relation_locks_fit_the_fast_path() {
    let scratch = Scratch::postgres_for_tests().await;
    let store = stale_statistics(&scratch, "AVAILABLE", 0).await;
    let mut tx = store.begin(CLAIM.begin).await.expect("begin");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "PREPARE under_test (text, text[], bigint, timestamptz, bigint) AS {};
         EXECUTE under_test ('{REPLICA}', ARRAY[]::text[], {BATCH}, now(), 10000)",
        CLAIM.sql
    )))
    .execute(&mut *tx)
    .await
    .expect("claim");
    // `pg_locks` itself is the read's own lock, taken last.
    let locks: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT relation::regclass::text FROM pg_locks
         WHERE pid = pg_backend_pid() AND locktype = 'relation'
             AND relation <> 'pg_locks'::regclass
         ORDER BY 1",
    )
    .fetch_all(&mut *tx)
    .await
    .expect("locks");
    sqlx::raw_sql("DEALLOCATE under_test")
        .execute(&mut *tx)
        .await
        .expect("deallocate");
    tx.rollback().await.expect("rollback");
    scratch.drop_database().await.expect("drop");

    assert!(
        locks
            .iter()
            .any(|relation| relation == "available_run_pkey"),
        "the claim's own locks are not among those read: {locks:?}"
    );
    // Counted, not read off `fastpath`: a lock also goes to the shared
    // table while any backend holds a strong lock on a relation whose oid
    // shares its fast-path partition, as other tests' migrations do in
    // their own databases (a clean-clone run saw `task_run_failed` so,
    // with 15 locks in all).
    assert!(
        locks.len() <= FAST_PATH_SLOTS,
        "a claim locks {} relations, more than a backend's {FAST_PATH_SLOTS} fast-path \
         slots: the rest go to the shared lock table ({locks:?})",
        locks.len()
    );
}

/// `FP_LOCK_SLOTS_PER_BACKEND` of PostgreSQL 15.
const FAST_PATH_SLOTS: usize = 16;

/// Tasks in [`a_halt_read_looks_up_only_the_runs_that_ended_badly`]'s
/// history, one run each, versioned.
const HALT_HISTORY: i64 = 20_000;
/// Every this many of them ended FAILED, the rest DONE.
const FAILED_EVERY: i64 = 100;
/// Every this many tasks were skipped since.
const SKIPPED_EVERY: i64 = 300;
/// Every this many tasks were retried since, their retry DONE.
const RETRIED_EVERY: i64 = 700;

/// The seeded failures that halt their line: neither skipped nor retried.
fn seeded_halts() -> i64 {
    (1..=HALT_HISTORY)
        .filter(|g| g % FAILED_EVERY == 0 && g % SKIPPED_EVERY != 0 && g % RETRIED_EVERY != 0)
        .count() as i64
}

/// The halt read (`gates::HALTS`, and the targets page's `TARGET_HALTS`)
/// with a long history: each run in `task_run_ended_badly` is looked up
/// in `task` by key, and no plan reads the tasks whose runs ended well.
/// As a join, the planner hashed (or, with a round's settings, merged)
/// the few failed runs against every task, whatever their count.
#[tokio::test]
async fn a_halt_read_looks_up_only_the_runs_that_ended_badly() {
    use crate::store::engine::gates::HALTS;

    let scratch = Scratch::postgres_for_tests().await;
    let store = PgStore::connect(&scratch.url).await.expect("connect");
    store.migrate().await.expect("migrate");
    let seed = format!(
        "INSERT INTO plan (id, name, created_at, created_by)
            SELECT g, 'p' || g, now(), 'test' FROM generate_series(1, {HALT_HISTORY}) g;
        INSERT INTO task (id, plan_id, name, target, exclusive, version, timeout_ms, max_attempts,
                executor, latest_run_id)
            SELECT g, g, 't', 'db/' || (g % 20), true, 'v' || (g % 7), 60000, 1,
                '{{\"kind\":\"sleep\",\"duration\":\"0s\"}}', g
            FROM generate_series(1, {HALT_HISTORY}) g;
        INSERT INTO task_run (id, task_id, plan_id, attempt, status, target, exclusive, version,
                timeout_ms, max_attempts, created_at, finished_at)
            SELECT g, g, g, 1, CASE WHEN g % {FAILED_EVERY} = 0 THEN 'FAILED' ELSE 'DONE' END,
                'db/' || (g % 20), true, 'v' || (g % 7), 60000, 1, now(), now()
            FROM generate_series(1, {HALT_HISTORY}) g;
        UPDATE task SET skipped_at = now(), skipped_by = 'test' WHERE id % {SKIPPED_EVERY} = 0;
        INSERT INTO task_run (id, task_id, plan_id, attempt, status, target, exclusive, version,
                timeout_ms, max_attempts, created_at, finished_at)
            SELECT {HALT_HISTORY} + g, g, g, 2, 'DONE', 'db/' || (g % 20), true, 'v' || (g % 7),
                60000, 2, now(), now()
            FROM generate_series({RETRIED_EVERY}, {HALT_HISTORY}, {RETRIED_EVERY}) g;
        UPDATE task SET latest_run_id = {HALT_HISTORY} + id WHERE id % {RETRIED_EVERY} = 0"
    );
    // Apart: VACUUM refuses the transaction that statements sent together run in.
    for sql in [seed.as_str(), "VACUUM ANALYZE plan, task, task_run"] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&store.pool)
            .await
            .expect("seed");
    }
    let failed = HALT_HISTORY / FAILED_EVERY;
    // In a round's transaction (its planner settings) and outside one (the
    // targets page).
    for begin in [BEGIN_INDEX_ONLY, "BEGIN"] {
        let text = explain_unprepared(&store, begin, HALTS).await;
        let explained: Value = serde_json::from_str(&text).expect("plan json");
        let all = nodes(&explained[0]["Plan"]);
        let halts = count(&explained[0]["Plan"], "Actual Rows");
        assert_eq!(
            halts,
            seeded_halts(),
            "the failures neither skipped nor retried halt their lines:\n{text}"
        );
        // Rows per loop are averages: a lookup that finds a skipped task
        // returns none, so the products are summed unrounded.
        let per_loop = |n: &Value, field: &str| n[field].as_f64().unwrap_or(0.0);
        let tasks_read = all
            .iter()
            .filter(|n| n["Relation Name"] == "task")
            .map(|n| {
                (per_loop(n, "Actual Rows") + per_loop(n, "Rows Removed by Filter"))
                    * per_loop(n, "Actual Loops")
            })
            .sum::<f64>()
            .round() as i64;
        assert!(
            tasks_read <= failed,
            "{begin}: the read took {tasks_read} task rows for {failed} failed runs \
             out of {HALT_HISTORY}:\n{text}"
        );
    }
    scratch.drop_database().await.expect("drop");
}
