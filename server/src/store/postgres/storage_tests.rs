//! What the run storage promises PostgreSQL's writes (docs/design.md,
//! "Status model", run storage): a run admitted at its submit and then
//! claimed and finished is rewritten in place (a HOT update, no new index
//! entry) by both, even while a transaction open elsewhere keeps page
//! pruning from reclaiming the versions the claims left.
//!
//! Read from PostgreSQL's own counts of updates, which its backends
//! report as they exit, not from a clock.

use std::time::Duration;

use sqlx::Connection;

use super::lock_tests::{self, admissible_of};
use crate::store::{Claim, Finish, Store};
use domain::model::RunStatus;
use domain::time::Ts;

/// Runs submitted, claimed and finished.
const RUNS: usize = 2_000;
/// Runs per claim, as a replica with that many free slots takes them.
const BATCH: i64 = 250;
const REPLICA: &str = "r-storage";

/// The share of `task_run`'s updates that must stay on their page. Each
/// run is updated twice (its claim, its finish), and its row grows with
/// each (about 150, then 200, then 220 bytes here): with pages filled at
/// insert to 50 %, 50 % of them stayed, at 34 % 72 %, at 30 % 88 %, at
/// 25 % (migration 0032) all. An index on a column either changes would
/// send every one elsewhere.
const HOT_AT_LEAST: f64 = 0.99;

#[tokio::test]
async fn claims_and_finishes_rewrite_runs_in_place_while_pruning_is_held_back() {
    let (scratch, store) = lock_tests::store().await;
    let plan = admissible_of("storage", RUNS);
    store
        .plan_insert(&plan, "test".into(), Ts::now())
        .await
        .expect("submitted");
    let available: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM task_run WHERE status = 'AVAILABLE'")
            .fetch_one(&store.pool)
            .await
            .expect("count");
    assert_eq!(available, RUNS as i64, "every run admitted at its submit");

    // A snapshot held open elsewhere, as a long submit or another
    // replica's claim holds one: no version these claims leave behind
    // can be pruned until it ends.
    let mut holder = sqlx::PgConnection::connect(&scratch.url)
        .await
        .expect("holder");
    sqlx::raw_sql("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT COUNT(*) FROM task_run")
        .execute(&mut holder)
        .await
        .expect("snapshot");

    let claim = Claim {
        replica_id: REPLICA,
        labels: &[],
        limit: BATCH,
        heartbeat_timeout: Duration::from_secs(60),
    };
    let mut finished = 0;
    loop {
        let claimed = store
            .run_claim_many(&claim, Ts::now())
            .await
            .expect("claim");
        if claimed.is_empty() {
            break;
        }
        let finishes: Vec<Finish> = claimed
            .iter()
            .map(|run| Finish {
                run_id: run.id,
                status: RunStatus::Done,
                result_code: Some(0),
                error: None,
            })
            .collect();
        store
            .run_finish_many(REPLICA, &finishes, Ts::now())
            .await
            .expect("finish");
        finished += finishes.len();
    }
    assert_eq!(finished, RUNS);
    sqlx::raw_sql("COMMIT")
        .execute(&mut holder)
        .await
        .expect("commit");

    // A backend reports its counts when it exits.
    store.pool.close().await;
    let (updates, hot) = updates_reported(&mut holder, 2 * RUNS as i64).await;
    let share = hot as f64 / updates as f64;
    assert!(
        share >= HOT_AT_LEAST,
        "{hot} of task_run's {updates} updates were HOT ({:.0} %), fewer than {:.0} %",
        share * 100.0,
        HOT_AT_LEAST * 100.0
    );
    drop(holder);
    scratch.drop_database().await.expect("drop");
}

/// `task_run`'s updates and HOT updates once at least `expected` updates
/// are reported (within 10 s).
async fn updates_reported(conn: &mut sqlx::PgConnection, expected: i64) -> (i64, i64) {
    let mut counts = (0, 0);
    for _ in 0..200 {
        counts = sqlx::query_as(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'task_run'",
        )
        .fetch_one(&mut *conn)
        .await
        .expect("pg_stat_user_tables");
        if counts.0 >= expected {
            return counts;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{} of {expected} updates of task_run reported", counts.0);
}
