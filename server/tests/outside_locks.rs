//! A database nobody could write to is no evidence against a replica
//! (docs/design.md, "Liveness"): real `baton serve` processes on one
//! PostgreSQL database while an outside client holds `LOCK TABLE` on the
//! runs table, then on the replica table, then one replica's row
//! `FOR UPDATE`, each for three times `stale_after`. Heartbeats wait
//! behind those locks, and so does the sweeper; every command, started
//! before the locks, must finish DONE on its first attempt, and `/readyz`
//! must answer within a second throughout.
//!
//! Before the rule, replicas stopped their own commands once their
//! heartbeats had waited three quarters of `stale_after`, and the sweeper
//! failed the rest as "run heartbeat missed" the moment the lock went.
//! The same holds while an outside client kills every connection again
//! and again, and the API answers 503 meanwhile, never 500.

mod common;

use std::time::{Duration, Instant};

use app::model::{PlanStatus, RunStatus, TaskStatus};
use common::process::{Baton, Options};
use common::{Kind, TestDb, eventually};
use serde_json::json;
use sqlx::Connection;

/// `Options::fast_liveness`'s.
const STALE_AFTER: Duration = Duration::from_secs(1);

/// Holds `lock` (statements run in one transaction) for `hold`, asking
/// every replica's `/readyz` meanwhile: each must answer within a second.
async fn hold(db: &TestDb, batons: &[Baton], lock: &str, hold: Duration) {
    let mut outside = sqlx::PgConnection::connect(db.url()).await.unwrap();
    let mut tx = outside.begin().await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(lock.to_owned()))
        .execute(&mut *tx)
        .await
        .unwrap();
    let until = Instant::now() + hold;
    while Instant::now() < until {
        for baton in batons {
            let asked = Instant::now();
            let (status, body) = baton.get_json("/readyz").await;
            let took = asked.elapsed();
            assert!(
                took < Duration::from_millis(1500),
                "/readyz of {} took {took:?} under `{lock}` ({status}: {body})",
                baton.replica_id
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tx.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn outside_locks_fail_no_run_and_stop_no_command() {
    let db = TestDb::new(Kind::Postgres).await;
    let store = db.store().await;
    let fast = Options::fast_liveness();
    let batons = [
        Baton::start(db.url(), &fast).await,
        Baton::start(db.url(), &fast).await,
    ];
    let tasks: Vec<_> = (0..4)
        .map(|i| {
            json!({"name": format!("t{i}"), "target": format!("db/{i}"), "max_attempts": 1,
                   "command": {"argv": ["sh", "-c", "sleep 14; echo finished"]}})
        })
        .collect();
    let plan = batons[0]
        .submit(json!({"name": "locked-out", "tasks": tasks}))
        .await
        .id;
    let running = eventually(Duration::from_secs(10), "all four RUNNING", || async {
        let view = batons[0].plan(plan).await?;
        view.tasks
            .iter()
            .all(|t| t.status == TaskStatus::Running)
            .then_some(view)
    })
    .await;
    let owner = running.tasks[0].replica_id.clone().unwrap();

    let long = 3 * STALE_AFTER;
    hold(
        &db,
        &batons,
        "LOCK TABLE task_run IN ACCESS EXCLUSIVE MODE",
        long,
    )
    .await;
    hold(
        &db,
        &batons,
        "LOCK TABLE replica IN ACCESS EXCLUSIVE MODE",
        long,
    )
    .await;
    let row = format!("SELECT * FROM replica WHERE replica_id = '{owner}' FOR UPDATE");
    hold(&db, &batons, &row, long).await;

    let done = eventually(Duration::from_secs(30), "the plan ended", || async {
        let view = batons[1].plan(plan).await?;
        matches!(view.status, PlanStatus::Done | PlanStatus::Failed).then_some(view)
    })
    .await;
    for task in &done.tasks {
        let run = store.run_get(task.run_id.unwrap()).await.unwrap();
        assert_eq!(
            (task.status, task.attempt, run.error.as_deref()),
            (TaskStatus::Done, Some(1), None),
            "{} was stopped or failed although its replica lived: {:#?}",
            task.name,
            run.events
        );
        assert!(run.events.iter().all(|e| e.to != RunStatus::Failed));
        assert_eq!(store.run_log(run.id).await.unwrap(), "finished\n");
    }
}

/// Connections killed every 300 ms (`pg_terminate_backend`, as an
/// administrator or a pooler might) for three times `stale_after`: the
/// API answers 503 while it cannot reach the database, never 500, and
/// every command runs once, DONE on its first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_connections_answer_503_and_cost_no_run() {
    let db = TestDb::new(Kind::Postgres).await;
    let store = db.store().await;
    let fast = Options::fast_liveness();
    let batons = [
        Baton::start(db.url(), &fast).await,
        Baton::start(db.url(), &fast).await,
    ];
    let tasks: Vec<_> = (0..3)
        .map(|i| {
            json!({"name": format!("t{i}"), "target": format!("db/{i}"), "max_attempts": 1,
                   "command": {"argv": ["sh", "-c", "sleep 6; echo finished"]}})
        })
        .collect();
    let plan = batons[0]
        .submit(json!({"name": "killed", "tasks": tasks}))
        .await
        .id;
    eventually(Duration::from_secs(10), "all three RUNNING", || async {
        let view = batons[0].plan(plan).await?;
        view.tasks
            .iter()
            .all(|t| t.status == TaskStatus::Running)
            .then_some(())
    })
    .await;

    let mut killer = sqlx::PgConnection::connect(db.url()).await.unwrap();
    let until = Instant::now() + 3 * STALE_AFTER;
    let mut answers = std::collections::BTreeMap::new();
    while Instant::now() < until {
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()
               AND backend_type = 'client backend'",
        )
        .execute(&mut killer)
        .await
        .unwrap();
        for baton in &batons {
            for path in [
                format!("/api/v1/plans/{plan}"),
                "/api/v1/runs?limit=5".into(),
            ] {
                let (status, body) = baton.get_json(&path).await;
                assert!(
                    status.is_success() || status.as_u16() == 503,
                    "{path} answered {status} while connections were killed: {body}"
                );
                *answers.entry(status.as_u16()).or_insert(0) += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    eprintln!("answers while connections were killed: {answers:?}");

    let done = eventually(Duration::from_secs(30), "the plan ended", || async {
        let view = batons[1].plan(plan).await?;
        matches!(view.status, PlanStatus::Done | PlanStatus::Failed).then_some(view)
    })
    .await;
    for task in &done.tasks {
        let run = store.run_get(task.run_id.unwrap()).await.unwrap();
        assert_eq!(
            (task.status, task.attempt, run.error.as_deref()),
            (TaskStatus::Done, Some(1), None),
            "{} was stopped or failed although its replica lived: {:#?}",
            task.name,
            run.events
        );
    }
    for baton in &batons {
        eventually(Duration::from_secs(5), "/readyz 200 again", || async {
            let (status, _) = baton.get_json("/readyz").await;
            status.is_success().then_some(())
        })
        .await;
    }
}
