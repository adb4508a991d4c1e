//! Three real `baton serve` processes on one PostgreSQL database complete
//! a plan together: each run executes exactly once, on one of them, and the
//! gates hold across processes.

mod common;

use std::process::Stdio;
use std::time::Duration;

use app::model::{PlanStatus, PlanView, ReplicaView};
use common::{Kind, TestDb, eventually, invariants};
use serde_json::json;
use tokio::process::{Child, Command};

struct Baton {
    child: Child,
    base: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn spawn_baton(database_url: &str) -> Baton {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("serve")
        .env("BATON_DATABASE_URL", database_url)
        .env("BATON_LISTEN", format!("127.0.0.1:{port}"))
        .env("BATON_WORKERS", "4")
        .env("BATON_POLL_INTERVAL", "200ms")
        .env(
            "BATON_LOG",
            std::env::var("TEST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start baton");
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    eventually(Duration::from_secs(30), "baton to answer /healthz", || {
        let url = format!("{base}/healthz");
        let http = http.clone();
        async move {
            http.get(url)
                .send()
                .await
                .ok()
                .filter(|r| r.status().is_success())
        }
    })
    .await;
    Baton { child, base }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_processes_complete_a_plan_together() {
    let db = TestDb::new(Kind::Postgres).await;
    // Migrate once up front so the three do not race on first start.
    db.store().await;
    let mut batons = Vec::new();
    for _ in 0..3 {
        batons.push(spawn_baton(db.url()).await);
    }
    let http = reqwest::Client::new();
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
    let submitted: PlanView = http
        .post(format!("{}/api/v1/plans", batons[0].base))
        .json(&json!({"name": "together", "parallel_limit": 8, "tasks": tasks}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let watcher = batons[2].base.clone();
    let view: PlanView = eventually(Duration::from_secs(90), "the plan DONE", || {
        let url = format!("{watcher}/api/v1/plans/{}", submitted.id);
        let http = http.clone();
        async move {
            let v: PlanView = http.get(url).send().await.ok()?.json().await.ok()?;
            (v.status == PlanStatus::Done).then_some(v)
        }
    })
    .await;
    let replicas: Vec<ReplicaView> = http
        .get(format!("{}/api/v1/replicas", batons[1].base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
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
        let pid = b.child.id().unwrap() as i32;
        // SAFETY: sending SIGTERM to our own child.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let status = tokio::time::timeout(Duration::from_secs(20), b.child.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "baton exited with {status}");
    }
    assert!(store.replica_list().await.unwrap().is_empty());
}
