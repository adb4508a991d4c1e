//! The single-process equivalents on SQLite (docs/design.md, "Invariants",
//! invariants 6 and 8): a `baton serve` killed with SIGKILL and started
//! again on the same file resolves the runs its previous life left RUNNING
//! (the new process has a new replica id and never re-executes them
//! blindly, and the killed one's command did not outlive it), and a
//! notification claimed just before the crash is still delivered.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::eventually;
use common::process::{Baton, Options};
use domain::model::{PlanStatus, TaskStatus};
use serde_json::json;

fn options() -> Options {
    Options::fast_liveness()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_process_sweeps_what_its_killed_predecessor_left_running() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("baton.db").display());
    let mut first = Baton::start(&url, &options()).await;
    let pid_file = dir.path().join("attempt-1.pid");
    let plan = first
        .submit(
            json!({"name": "crash", "tasks": [{"name": "long", "target": "t",
            "max_attempts": 2, "command": {"argv": ["sh", "-c",
                "if [ \"$BATON_ATTEMPT\" = 1 ]; then echo $$ > \"$PID_FILE\"; sleep 60; fi; \
                 echo attempt $BATON_ATTEMPT"],
                "env": {"PID_FILE": pid_file.to_str().unwrap()}}}]}),
        )
        .await;
    let running = eventually(Duration::from_secs(20), "the run RUNNING", || async {
        let view = first.plan(plan.id).await?;
        let task = view.tasks.into_iter().next()?;
        (task.status == TaskStatus::Running).then_some(task)
    })
    .await;
    let dead = first.replica_id.clone();
    let pid = eventually(Duration::from_secs(10), "the command's pid", || async {
        std::fs::read_to_string(&pid_file)
            .ok()?
            .trim()
            .parse::<i32>()
            .ok()
    })
    .await;
    first.sigkill().await;
    // Its supervisor sees the replica's feed close and kills the command
    // with its children: nothing of the dead process keeps running.
    eventually(
        Duration::from_secs(5),
        "the orphaned command killed",
        || async {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let gone = stat
                .rsplit_once(") ")
                .is_none_or(|(_, rest)| rest.starts_with('Z'));
            gone.then_some(())
        },
    )
    .await;

    let second = Baton::start(&url, &options()).await;
    assert_ne!(second.replica_id, dead, "a new life, a new replica id");
    let view = eventually(Duration::from_secs(30), "the plan DONE", || async {
        let view = second.plan(plan.id).await?;
        (view.status == PlanStatus::Done).then_some(view)
    })
    .await;
    let task = &view.tasks[0];
    assert_eq!(task.attempt, Some(2));
    assert_eq!(task.replica_id.as_deref(), Some(second.replica_id.as_str()));
    let store = baton::store::connect(&url).await.unwrap();
    let first_run = store.run_get(running.run_id.unwrap()).await.unwrap();
    assert_eq!(
        first_run
            .error
            .as_deref()
            .map(|e| e.starts_with(&format!("replica {dead} stopped heart-beating at "))),
        Some(true),
        "{first_run:?}"
    );
    assert_eq!(
        store.run_log(task.run_id.unwrap()).await.unwrap(),
        "attempt 2\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_notification_claimed_just_before_a_crash_is_delivered_after_restart() {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let recorded = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: String| {
            let recorded = recorded.clone();
            async move { recorded.lock().unwrap().push(body) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("baton.db").display());
    let with_hook = options().env("BATON_WEBHOOK_URL", &hook);
    let mut crasher = Baton::start(
        &url,
        &with_hook
            .clone()
            .env("BATON_FAULT", "exit-after-notification-claim"),
    )
    .await;
    // Long enough for the submission's answer to arrive before the death.
    crasher
        .submit(json!({"name": "crash", "tasks": [{"name": "a", "target": "t", "sleep": "1s"}]}))
        .await;
    tokio::time::timeout(Duration::from_secs(30), crasher.wait())
        .await
        .expect("the process dies right after claiming");

    let _restarted = Baton::start(&url, &with_hook).await;
    // At once, or once the dead sender's 30 s lock lapses if it had taken
    // the row before dying.
    let got = eventually(Duration::from_secs(45), "the delivery", || async {
        let got = seen.lock().unwrap().clone();
        (!got.is_empty()).then_some(got)
    })
    .await;
    let body: serde_json::Value = serde_json::from_str(&got[0]).unwrap();
    assert_eq!(body["event"], "PIPELINE_COMPLETED");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(seen.lock().unwrap().len(), 1, "delivered once");
}
