//! The queue of AVAILABLE runs in a rolling upgrade
//! (`engine::queue_repair`): what the moves of a replica of an older
//! build leave wrong in it is repaired while such a replica may write,
//! and for a minute after its row is gone, and not after that.

use std::time::Duration;

use super::PgStore;
use crate::bench::scratch::Scratch;
use crate::plan::parse_json;
use crate::store::{Claim, ReplicaInfo, Store};
use domain::gates::NodeLabels;
use domain::time::Ts;

/// Runs whose queue row disagrees with their status or node, as
/// `tests/common/mod.rs` checks after every test.
const DISAGREEING: &str = "SELECT COUNT(*) FROM (
    SELECT r.id FROM task_run r WHERE r.status = 'AVAILABLE'
        AND NOT EXISTS (SELECT 1 FROM available_run q WHERE q.run_id = r.id
            AND q.node IS NOT DISTINCT FROM r.node)
    UNION ALL
    SELECT q.run_id FROM available_run q WHERE NOT EXISTS (
        SELECT 1 FROM task_run r WHERE r.id = q.run_id AND r.status = 'AVAILABLE')) x";

/// Submits a one-task plan (its run waiting for `run_at` when given);
/// its run's id.
pub(super) async fn run_of_plan(store: &PgStore, name: &str, run_at: Option<&str>) -> i64 {
    let mut task = serde_json::json!({"name": "t", "target": name, "sleep": "0s"});
    if let Some(at) = run_at {
        task["run_at"] = at.into();
    }
    let body = serde_json::json!({"name": name, "tasks": [task]});
    let plan = parse_json(body.to_string().as_bytes()).expect("a valid plan");
    let plan_id = store
        .plan_insert(&plan, "test".into(), Ts::now())
        .await
        .expect("submit");
    sqlx::query_scalar("SELECT id FROM task_run WHERE plan_id = $1")
        .bind(plan_id)
        .fetch_one(&store.pool)
        .await
        .expect("its run")
}

async fn run_sql(store: &PgStore, sql: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&store.pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn disagreeing(store: &PgStore) -> i64 {
    sqlx::query_scalar(DISAGREEING)
        .fetch_one(&store.pool)
        .await
        .expect("the queue's agreement")
}

#[tokio::test]
async fn an_older_builds_moves_are_repaired_while_it_may_write() {
    let scratch = Scratch::postgres_for_tests().await;
    let store = PgStore::connect(&scratch.url).await.expect("connect");
    store.migrate().await.expect("migrate");
    let now = Ts::now();

    let new = ReplicaInfo {
        replica_id: "r-new".into(),
        hostname: "test".into(),
        labels: Vec::new(),
        version: "new".into(),
        started_at: now,
    };
    store.replica_upsert(&new, now).await.expect("heartbeat");
    let storage: i16 =
        sqlx::query_scalar("SELECT run_storage FROM replica WHERE replica_id = 'r-new'")
            .fetch_one(&store.pool)
            .await
            .expect("its row");
    assert_eq!(
        i64::from(storage),
        crate::store::engine::queue_repair::RUN_STORAGE,
        "a replica of this build says it keeps the queue and the logs"
    );
    assert_eq!(
        store.run_queue_repair(now).await.expect("repair"),
        None,
        "no older build: nothing is looked at"
    );

    let claimed_by_old = run_of_plan(&store, "a", None).await;
    let available = run_of_plan(&store, "b", None).await;
    let unpinned_by_old = run_of_plan(&store, "c", None).await;
    let promoted_by_old = run_of_plan(&store, "d", Some("2999-01-01T00:00:00Z")).await;
    let promoted_unrepaired = run_of_plan(&store, "e", Some("2999-01-01T00:00:00Z")).await;
    store
        .run_promote_round(&NodeLabels::default(), None, now)
        .await
        .expect("round");
    assert_eq!(disagreeing(&store).await, 0, "this build keeps the queue");

    // A replica of an older build joins and moves runs its way: a claim
    // and a promotion without the queue, and a pin it dropped (here the
    // queue row keeps one the run no longer has).
    run_sql(
        &store,
        &format!(
            "INSERT INTO replica (replica_id, hostname, labels, version, started_at, last_heartbeat)
                VALUES ('r-old', 'test', '[]', 'old', now(), now());
            UPDATE task_run SET status = 'RUNNING', replica_id = 'r-old', started_at = now()
                WHERE id = {claimed_by_old};
            UPDATE task_run SET status = 'AVAILABLE', waiting_cause = NULL
                WHERE id = {promoted_by_old};
            UPDATE available_run SET node = 'gpu' WHERE run_id = {unpinned_by_old};"
        ),
    )
    .await;
    assert_eq!(disagreeing(&store).await, 3);
    assert_eq!(store.run_queue_repair(now).await.expect("repair"), Some(3));
    assert_eq!(disagreeing(&store).await, 0, "the queue agrees again");
    // Another promotion of the older build's, not yet repaired: while it
    // may write, a claimer of this build reads the statuses, as it does.
    run_sql(
        &store,
        &format!(
            "UPDATE task_run SET status = 'AVAILABLE', waiting_cause = NULL
                WHERE id = {promoted_unrepaired}"
        ),
    )
    .await;
    let labels: Vec<String> = Vec::new();
    let claim = Claim {
        replica_id: "r-new",
        labels: &labels,
        limit: 10,
        heartbeat_timeout: Duration::from_secs(10),
    };
    let mut got: Vec<i64> = store
        .run_claim_many(&claim, now)
        .await
        .expect("claim")
        .iter()
        .map(|r| r.id)
        .collect();
    got.sort_unstable();
    assert_eq!(
        got,
        vec![
            available,
            unpinned_by_old,
            promoted_by_old,
            promoted_unrepaired
        ],
        "a claimer of this build takes what the older one promoted and unpinned, \
         repaired or not, and not what it claimed"
    );

    // It stops cleanly: its row goes, after its hand-back, which the
    // repairs of the next minute still see.
    run_sql(
        &store,
        &format!(
            "UPDATE task_run SET status = 'AVAILABLE', replica_id = NULL, started_at = NULL
                WHERE id = {claimed_by_old};
            DELETE FROM replica WHERE replica_id = 'r-old';"
        ),
    )
    .await;
    let later = now.plus(Duration::from_secs(30));
    assert_eq!(
        store.run_queue_repair(later).await.expect("repair"),
        Some(1)
    );
    assert_eq!(disagreeing(&store).await, 0);

    // A minute after the older build was last seen, nothing is looked at:
    // a disagreement made now (by hand) stays.
    run_sql(
        &store,
        &format!("DELETE FROM available_run WHERE run_id = {claimed_by_old}"),
    )
    .await;
    let after = now.plus(Duration::from_secs(61));
    assert_eq!(store.run_queue_repair(after).await.expect("repair"), None);
    assert_eq!(disagreeing(&store).await, 1);
    scratch.drop_database().await.expect("drop");
}
