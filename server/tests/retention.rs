//! Retention through the binary, on both backends: `baton prune` counts
//! with `--dry-run` and deletes without, refusing absurd windows; a
//! leader started with `BATON_RETAIN_FINISHED` prunes on its own. Plans
//! are aged by moving their timestamps two hours back in the database,
//! as if they had finished then.

mod common;

use std::process::Output;
use std::time::Duration;

use common::process::{Baton, Options, spawn_baton};
use common::{Kind, TestDb, eventually};
use domain::model::PlanStatus;
use serde_json::json;

async fn prune(db: &TestDb, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("prune")
        .args(args)
        .env("BATON_DATABASE_URL", db.url())
        .env_remove("RUST_BACKTRACE")
        .output()
        .await
        .expect("run baton prune")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Moves every plan and run two hours into the past; on PostgreSQL the
/// finish log's times too (docs/design.md, "Run storage"), as they would
/// have been written two hours ago.
async fn age_everything(db: &TestDb) {
    let (shift, finish_log) = match db.kind {
        Kind::Sqlite => ("- 7200000000", ""),
        Kind::Postgres => (
            "- interval '2 hours'",
            "UPDATE finish_log SET finished_at = finished_at - interval '2 hours';",
        ),
    };
    db.execute(&format!(
        "UPDATE plan SET created_at = created_at {shift};
         UPDATE task_run SET created_at = created_at {shift}, started_at = started_at {shift},
             finished_at = finished_at {shift};
         {finish_log}"
    ))
    .await;
}

/// Submits a one-task plan and waits until it is DONE (or, with
/// `start: false`, returns at once).
async fn finished_plan(server: &Baton, name: &str, start: bool) -> i64 {
    let view = server
        .submit(json!({"name": name, "start": start,
            "tasks": [{"name": "a", "target": name, "sleep": "0s"}]}))
        .await;
    if start {
        eventually(Duration::from_secs(20), "the plan is DONE", || async {
            let plan = server.plan(view.id).await?;
            (plan.status == PlanStatus::Done).then_some(())
        })
        .await;
    }
    view.id
}

async fn plans(db: &TestDb) -> i64 {
    db.count("SELECT COUNT(*) FROM plan").await
}

async fn prune_by_command_and_by_the_leader(kind: Kind) {
    let db = TestDb::new(kind).await;
    let mut server = spawn_baton(db.url()).await;
    finished_plan(&server, "old-1", true).await;
    finished_plan(&server, "old-2", true).await;
    let waiting = finished_plan(&server, "not-started", false).await;
    // It holds the highest plan, task and run ids: kept, so that ids only
    // grow (SQLite would hand a pruned newest id out again).
    let newest = finished_plan(&server, "newest", true).await;
    age_everything(&db).await;

    // Absurd windows are refused, naming the value; nothing changes.
    for bad in ["0s", "10s", "forever", "yesterday", "-1h"] {
        let out = prune(&db, &[&format!("--older-than={bad}")]).await;
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{bad}: {stderr}");
        assert!(stderr.contains(bad), "{bad}: {stderr}");
    }
    let out = prune(&db, &["--older-than", "1h", "--dry-run"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("would delete 2 finished plans (about 2 runs)"),
        "{}",
        text(&out.stdout)
    );
    // The cutoff with its date: "since 14:05:00Z" could be any day.
    let cutoff = chrono::Utc::now() - chrono::Duration::hours(1);
    let days = [cutoff - chrono::Duration::minutes(1), cutoff]
        .map(|t| t.format("since %Y-%m-%d ").to_string());
    assert!(
        days.iter().any(|day| text(&out.stdout).contains(day)),
        "{} has no {days:?}",
        text(&out.stdout)
    );
    assert_eq!(plans(&db).await, 4, "a dry run deletes nothing");
    // Younger than three hours: nothing to do.
    let out = prune(&db, &["--older-than", "3h"]).await;
    assert!(
        text(&out.stdout).starts_with("nothing to prune"),
        "{}",
        text(&out.stdout)
    );
    // With the server running beside it.
    let out = prune(&db, &["--older-than", "1h"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains("deleted 2 plans: 2 tasks, 2 runs, 8 events"),
        "{stdout}"
    );
    assert_eq!(plans(&db).await, 2);
    assert!(server.plan(waiting).await.is_some(), "not started: kept");
    assert!(server.plan(newest).await.is_some(), "the highest ids: kept");

    // The leader of a replica started with a retention window prunes on
    // its own, at its first round: `newest` is no longer the newest.
    let old_3 = finished_plan(&server, "old-3", true).await;
    let newest_2 = finished_plan(&server, "newest-2", true).await;
    age_everything(&db).await;
    server.sigterm_and_wait(Duration::from_secs(30)).await;
    let server = Baton::start(
        db.url(),
        &Options::default().env("BATON_RETAIN_FINISHED", "1h"),
    )
    .await;
    eventually(
        Duration::from_secs(30),
        "the leader prunes newest and old-3",
        || async { (plans(&db).await == 2).then_some(()) },
    )
    .await;
    assert!(server.plan(waiting).await.is_some());
    assert!(server.plan(newest_2).await.is_some());
    assert!(server.plan(old_3).await.is_none());
}

/// A mistyped SQLite path is refused, naming it, and no empty database is
/// left there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_refuses_a_missing_sqlite_file_and_creates_none() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("typo.db");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["prune", "--older-than", "7d", "--dry-run"])
        .env(
            "BATON_DATABASE_URL",
            format!("sqlite://{}", missing.display()),
        )
        .output()
        .await
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("no SQLite database at"), "{stderr}");
    assert!(stderr.contains("typo.db"), "{stderr}");
    assert!(!missing.exists(), "prune created {}", missing.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_prune_by_command_and_by_the_leader() {
    prune_by_command_and_by_the_leader(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_prune_by_command_and_by_the_leader() {
    prune_by_command_and_by_the_leader(Kind::Postgres).await;
}
