//! The plan PostgreSQL picks for the claim when its statistics are stale,
//! as they are after every burst: `task_run`'s status mix changes far
//! faster than autovacuum re-analyzes it. (The batched finish, checked by
//! hand the same way, stays linear: a hash join over the RUNNING runs.)
//!
//! These tests count rows read in `EXPLAIN ANALYZE`, not time, so a slow
//! machine cannot fail them and a quadratic plan cannot pass.

use serde_json::Value;
use sqlx::Row;

use super::{CLAIM, PgStore};
use crate::store::Store;
use crate::store::scratch::Scratch;

const HISTORY: i64 = 200;
const AVAILABLE: i64 = 3_000;
const BATCH: i64 = 300;

/// A database whose last ANALYZE saw only finished runs, and which now
/// holds thousands of AVAILABLE ones: what the promoter leaves behind
/// after a quiet period and a big submit.
async fn stale_statistics(scratch: &Scratch) -> PgStore {
    let store = PgStore::connect(&scratch.url).await.expect("connect");
    store.migrate().await.expect("migrate");
    let seed = |first: i64, count: i64, status: &'static str| {
        format!(
            "INSERT INTO plan (id, name, created_at, created_by)
                SELECT g, 'p' || g, now(), 'test' FROM generate_series({first}, {last}) g;
            INSERT INTO task (id, plan_id, name, target, exclusive, timeout_ms, max_attempts, executor)
                SELECT g, g, 't', 'db/' || (g % 20), false, 60000, 1, '{{\"kind\":\"sleep\",\"duration\":\"0s\"}}'
                FROM generate_series({first}, {last}) g;
            INSERT INTO task_run (id, task_id, plan_id, attempt, status, target, exclusive,
                    timeout_ms, max_attempts, created_at, finished_at)
                SELECT g, g, g, 1, '{status}', 'db/' || (g % 20), false, 60000, 1, now(),
                    CASE WHEN '{status}' = 'DONE' THEN now() END
                FROM generate_series({first}, {last}) g;",
            last = first + count - 1,
        )
    };
    let statements = [
        // Autovacuum must not refresh the statistics before the claim runs.
        "ALTER TABLE task_run SET (autovacuum_enabled = false)".to_owned(),
        seed(1, HISTORY, "DONE"),
        "ANALYZE".to_owned(),
        seed(HISTORY + 1, AVAILABLE, "AVAILABLE"),
    ];
    for sql in statements {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&store.pool)
            .await
            .expect("seed");
    }
    store
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

#[tokio::test]
async fn a_claim_reads_only_the_runs_it_claims_under_stale_statistics() {
    let admin = std::env::var("BATON_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let scratch = Scratch::postgres(&admin)
        .await
        .expect("a PostgreSQL test server (scripts/test.sh starts one)");
    let store = stale_statistics(&scratch).await;

    let mut tx = store.pool.begin().await.expect("begin");
    PgStore::index_only(&mut tx).await.expect("settings");
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) {CLAIM}"
    )))
    .bind("r-test")
    .bind(Vec::<String>::new())
    .bind(BATCH)
    .bind(crate::store::Ts::now())
    .bind(10_000_i64)
    .fetch_one(&mut *tx)
    .await
    .expect("explain the claim");
    // EXPLAIN's json column travels as text; sqlx is built without its
    // json feature, which nothing else needs.
    let text: String = row.try_get_unchecked(0).expect("plan text");
    tx.rollback().await.expect("rollback");
    scratch.drop_database().await.expect("drop");

    let explained: Value = serde_json::from_str(&text).expect("plan json");
    let plan = &explained[0]["Plan"];
    let all = nodes(plan);
    let claimed = all
        .iter()
        .find(|n| n["Node Type"] == "ModifyTable" && n["Operation"] == "Update")
        .map(|n| count(n, "Actual Rows"))
        .expect("an UPDATE node");
    assert_eq!(claimed, BATCH, "the claim takes a full batch:\n{text}");
    for node in &all {
        assert_eq!(
            count(node, "Rows Removed by Join Filter"),
            0,
            "no join compares runs pairwise:\n{text}"
        );
        if node["Relation Name"] == "task_run" {
            let read = count(node, "Actual Rows") * count(node, "Actual Loops");
            assert!(
                read <= BATCH,
                "a task_run scan read {read} rows for a batch of {BATCH} \
                 out of {AVAILABLE} AVAILABLE:\n{text}"
            );
        }
    }
}
