//! The logs of claims and finishes in a rolling upgrade (migration 0030,
//! docs/design.md, "Run storage"): what a replica of an older build
//! claims and ends, without writing the logs, is logged by the trigger
//! while such a replica may write; this build's own statements are logged
//! once, not twice; the trigger goes once no older build may write.

use std::time::Duration;

use super::PgStore;
use super::queue_repair_tests::run_of_plan;
use crate::bench::scratch::Scratch;
use crate::store::{Claim, Finish, Store};
use domain::gates::NodeLabels;
use domain::model::RunStatus;
use domain::time::Ts;

/// How many rows of `log` list `run`.
async fn listed(store: &PgStore, log: &str, run: i64) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM {log} WHERE $1 = ANY(runs)"
    )))
    .bind(run)
    .fetch_one(&store.pool)
    .await
    .expect("the log")
}

async fn running(store: &PgStore) -> Vec<i64> {
    sqlx::query_scalar("SELECT id FROM running_run ORDER BY id")
        .fetch_all(&store.pool)
        .await
        .expect("the RUNNING runs")
}

async fn logging_for_older_builds(store: &PgStore) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'task_run_logged')")
        .fetch_one(&store.pool)
        .await
        .expect("the trigger")
}

#[tokio::test]
async fn an_older_builds_claims_and_finishes_are_logged_while_one_may_write() {
    let scratch = Scratch::postgres_for_tests().await;
    let store = PgStore::connect(&scratch.url).await.expect("connect");
    store.migrate().await.expect("migrate");
    let now = Ts::now();
    let by_old = run_of_plan(&store, "a", None).await;
    let by_new = run_of_plan(&store, "b", None).await;
    let by_old_later = run_of_plan(&store, "c", None).await;
    store
        .run_promote_round(&NodeLabels::default(), None, now)
        .await
        .expect("round");

    // No older build: no trigger (the migration makes it only for one
    // that has a row), and a repair looks at nothing.
    assert!(!logging_for_older_builds(&store).await);
    assert_eq!(store.run_queue_repair(now).await.expect("repair"), None);
    assert!(!logging_for_older_builds(&store).await);

    // A replica of an older build has a row (here made after the
    // migration: the repair makes the trigger, as the migration would
    // have), then claims and ends a run its way, on a connection that
    // does not say it writes the logs.
    let old = sqlx::PgPool::connect(&scratch.url)
        .await
        .expect("old build");
    sqlx::raw_sql(
        "INSERT INTO replica (replica_id, hostname, labels, version, started_at, last_heartbeat)
            VALUES ('r-old', 'test', '[]', 'old', now(), now())",
    )
    .execute(&old)
    .await
    .expect("the old replica's row");
    store.run_queue_repair(now).await.expect("repair");
    assert!(logging_for_older_builds(&store).await);
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DELETE FROM available_run WHERE run_id = {by_old};
        UPDATE task_run SET status = 'RUNNING', replica_id = 'r-old', started_at = now()
            WHERE id = {by_old};"
    )))
    .execute(&old)
    .await
    .expect("the old claim");
    assert_eq!(running(&store).await, vec![by_old], "read as RUNNING");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "UPDATE task_run SET status = 'DONE', finished_at = now() WHERE id = {by_old}"
    )))
    .execute(&old)
    .await
    .expect("the old finish");
    assert_eq!(listed(&store, "finish_log", by_old).await, 1);
    assert!(running(&store).await.is_empty());

    // This build's claim and finish log themselves, once.
    let labels: Vec<String> = Vec::new();
    let claim = Claim {
        replica_id: "r-new",
        labels: &labels,
        // The runs are claimed in id order: `by_new`, not `by_old_later`.
        limit: 1,
        heartbeat_timeout: Duration::from_secs(10),
    };
    let claimed = store.run_claim_many(&claim, now).await.expect("claim");
    assert_eq!(claimed.len(), 1);
    assert_eq!(running(&store).await, vec![by_new]);
    assert_eq!(listed(&store, "claim_log", by_new).await, 1);
    let finish = Finish {
        run_id: by_new,
        status: RunStatus::Done,
        result_code: Some(0),
        error: None,
    };
    store
        .run_finish_many("r-new", &[finish], Ts::now())
        .await
        .expect("finish");
    assert_eq!(listed(&store, "finish_log", by_new).await, 1);

    // While the older replica's row is there, and for a minute after it
    // went, the trigger stays; then the next repair drops it.
    store.run_queue_repair(now).await.expect("repair");
    assert!(logging_for_older_builds(&store).await);
    sqlx::raw_sql("DELETE FROM replica WHERE replica_id = 'r-old'")
        .execute(&old)
        .await
        .expect("the old build stops");
    store
        .run_queue_repair(now.plus(Duration::from_secs(30)))
        .await
        .expect("repair");
    assert!(logging_for_older_builds(&store).await);
    store
        .run_queue_repair(now.plus(Duration::from_secs(61)))
        .await
        .expect("repair");
    assert!(
        !logging_for_older_builds(&store).await,
        "the trigger is gone"
    );

    // The older replica comes back (it was frozen) and claims before any
    // repair: that claim is not logged, and reads miss it until the next
    // repair puts the trigger back and lists it.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO replica (replica_id, hostname, labels, version, started_at, last_heartbeat)
            VALUES ('r-old', 'test', '[]', 'old', now(), now());
        DELETE FROM available_run WHERE run_id = {by_old_later};
        UPDATE task_run SET status = 'RUNNING', replica_id = 'r-old', started_at = now()
            WHERE id = {by_old_later};"
    )))
    .execute(&old)
    .await
    .expect("the old build's late claim");
    assert!(running(&store).await.is_empty(), "not logged");
    store
        .run_queue_repair(now.plus(Duration::from_secs(62)))
        .await
        .expect("repair");
    assert!(
        logging_for_older_builds(&store).await,
        "the trigger is back"
    );
    assert_eq!(
        running(&store).await,
        vec![by_old_later],
        "listed by the repair"
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "UPDATE task_run SET status = 'DONE', finished_at = now() WHERE id = {by_old_later};
        DELETE FROM replica WHERE replica_id = 'r-old';"
    )))
    .execute(&old)
    .await
    .expect("the old build ends it and stops");
    old.close().await;
    assert_eq!(listed(&store, "finish_log", by_old_later).await, 1);
    // The sweeper's compaction: no run of the two claims is RUNNING.
    let mut tx = store.pool.begin().await.expect("tx");
    let compacted = <PgStore as crate::store::engine::Dialect>::claim_log_compact(&mut tx)
        .await
        .expect("compact");
    tx.commit().await.expect("commit");
    assert_eq!(compacted, 3, "every claim's row is stale");
    scratch.drop_database().await.expect("drop");
}
