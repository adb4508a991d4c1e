//! Three real `baton serve` processes on one PostgreSQL database complete
//! a plan together: each run executes exactly once, on one of them, and the
//! gates hold across processes.

mod common;

use std::time::Duration;

use common::process::{Baton, Options, spawn_baton};
use common::{Kind, TestDb, eventually, invariants};
use domain::model::{PlanStatus, PlanView};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_processes_complete_a_plan_together() {
    let db = TestDb::new(Kind::Postgres).await;
    // Migrate once up front so the three do not race on first start.
    db.store().await;
    let mut batons = Vec::new();
    for _ in 0..3 {
        batons.push(spawn_baton(db.url()).await);
    }
    let tasks: Vec<_> = (0..36)
        .map(|i| {
            json!({
                "name": format!("step-{i}"),
                "target": format!("db/{}", i % 6),
                "exclusive": i % 4 != 0,
                "version": format!("{}", i / 6),
                "command": {"argv": ["sh", "-c", "sleep 0.1; echo done on $BATON_RUN_ID"]},
            })
        })
        .collect();
    let submitted = batons[0]
        .submit(json!({"name": "together", "parallel_limit": 8, "tasks": tasks}))
        .await;
    let watcher = &batons[2];
    let view: PlanView = eventually(Duration::from_secs(90), "the plan DONE", || async move {
        let v = watcher.plan(submitted.id).await?;
        (v.status == PlanStatus::Done).then_some(v)
    })
    .await;
    let replicas = batons[1].replicas().await;
    assert_eq!(replicas.iter().filter(|r| r.alive).count(), 3);
    let store = db.store().await;
    let events = invariants::all_events(store.as_ref()).await;
    invariants::check(std::slice::from_ref(&view), &events);
    let used: std::collections::HashSet<_> = view
        .tasks
        .iter()
        .filter_map(|t| t.replica_id.clone())
        .collect();
    assert!(used.len() >= 2, "runs spread over processes: {used:?}");
    for t in &view.tasks {
        let log = store.run_log(t.run_id.unwrap()).await.unwrap();
        assert_eq!(log, format!("done on {}\n", t.run_id.unwrap()));
    }
    // SIGTERM: each process stops cleanly and removes its heartbeat row.
    for b in &mut batons {
        let status = b.sigterm_and_wait(Duration::from_secs(20)).await;
        assert!(status.success(), "baton exited with {status}");
    }
    assert!(store.replica_list().await.unwrap().is_empty());
}

/// A command inherits none of the server's settings (docs/security.md,
/// "What a command sees"): it printed `BATON_DATABASE_URL`, password and
/// all, and the webhook secret into a log every viewer reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_command_sees_none_of_batons_settings() {
    let db = TestDb::new(Kind::Postgres).await;
    db.store().await;
    let options = Options::default()
        .env("BATON_WEBHOOK_SECRET", "whsec-do-not-print")
        .env("BATON_TASK_ENV", "PASSED_ON")
        .env("PASSED_ON", "yes")
        .env("NOT_LISTED", "kept-back");
    let baton = Baton::start(db.url(), &options).await;
    let plan = baton
        .submit(
            json!({"name": "env", "tasks": [{"name": "env", "target": "t",
            "command": {"argv": ["env"], "env": {"FROM_PLAN": "given"}}}]}),
        )
        .await;
    let done = eventually(Duration::from_secs(30), "the plan DONE", || async {
        let v = baton.plan(plan.id).await?;
        (v.status == PlanStatus::Done).then_some(v)
    })
    .await;
    let run_id = done.tasks[0].run_id.unwrap();
    let log = db.store().await.run_log(run_id).await.unwrap();
    let names: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, _)| k)
        .collect();
    for hidden in [
        "BATON_DATABASE_URL",
        "BATON_WEBHOOK_SECRET",
        "BATON_LISTEN",
        "NOT_LISTED",
    ] {
        assert!(
            !names.contains(&hidden),
            "{hidden} reached the command:\n{log}"
        );
    }
    assert!(!log.contains("whsec-do-not-print"), "{log}");
    for seen in [
        "PATH",
        "PASSED_ON",
        "FROM_PLAN",
        "BATON_RUN_ID",
        "BATON_ATTEMPT",
    ] {
        assert!(names.contains(&seen), "{seen} missing:\n{log}");
    }
    assert!(log.contains(&format!("BATON_RUN_ID={run_id}\n")), "{log}");
}
