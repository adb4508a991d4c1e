//! Hostile and careless input must not stop the cluster (issue 18, item 1):
//! absurd durations, times and sizes are refused at submit with the field
//! and its bound, and nothing is stored; a scheduler loop that fails every
//! round makes `/readyz` say which loop and why, and recovers with the
//! database; a loop that panics stops its process with a non-zero exit.

mod common;

use std::time::Duration;

use common::server::Server;
use common::{Kind, TestDb, eventually};
use domain::model::{PlanList, PlanStatus};
use serde_json::{Value, json};

/// One task on `t` with `fields` merged in (a `sleep` executor unless the
/// fields name another).
fn task(fields: Value) -> Value {
    let mut task = json!({"name": "a", "target": "t"});
    let merged = task.as_object_mut().unwrap();
    for (k, v) in fields.as_object().unwrap() {
        merged.insert(k.clone(), v.clone());
    }
    if !["command", "http", "sleep"]
        .iter()
        .any(|k| merged.contains_key(*k))
    {
        merged.insert("sleep".into(), json!("0s"));
    }
    task
}

fn one_task(fields: Value) -> Value {
    json!({"name": "p", "tasks": [task(fields)]})
}

/// Each plan a hostile trial submitted (or its kin), and the field the
/// refusal must name.
fn poison_plans() -> Vec<(Value, &'static str)> {
    let mut cases = vec![
        (one_task(json!({"timeout": "1000000y"})), "tasks[0].timeout"),
        (one_task(json!({"timeout": "1ns"})), "tasks[0].timeout"),
        (
            one_task(json!({"heartbeat_timeout": "1000000y"})),
            "tasks[0].heartbeat_timeout",
        ),
        (
            one_task(json!({"heartbeat_interval": "0s"})),
            "tasks[0].heartbeat_interval",
        ),
        (
            one_task(json!({"node": "gpu", "reassign_after": "1000000y"})),
            "tasks[0].reassign_after",
        ),
        (one_task(json!({"sleep": "1000000y"})), "tasks[0].sleep"),
        (
            one_task(json!({"run_at": "0001-01-01T00:00:00Z"})),
            "tasks[0].run_at",
        ),
        (
            one_task(json!({"max_attempts": i64::MAX})),
            "tasks[0].max_attempts",
        ),
        (one_task(json!({"name": "a\u{0}b"})), "tasks[0].name"),
        (one_task(json!({"target": "db/\u{0}"})), "tasks[0].target"),
        (
            one_task(json!({"command": {"argv": ["echo"], "env": {"K": "v\u{0}"}}})),
            "tasks[0].command.env.K",
        ),
        (
            one_task(json!({"target": "x".repeat(201)})),
            "tasks[0].target",
        ),
        (
            one_task(json!({"http": {"url": "http://x", "headers": {"A": "b\r\nEvil: 1"}}})),
            "tasks[0].http.headers.A",
        ),
        (
            json!({"name": "p", "parallel_limit": i64::MAX, "tasks": [task(json!({}))]}),
            "parallel_limit",
        ),
        (
            json!({"name": "p\u{0}", "tasks": [task(json!({}))]}),
            "name",
        ),
    ];
    let too_many: Vec<_> = (0..=baton::plan::limits::MAX_TASKS)
        .map(|i| json!({"name": format!("t{i}"), "target": "t", "sleep": "0s"}))
        .collect();
    cases.push((json!({"name": "huge", "tasks": too_many}), "tasks"));
    cases
}

mod cases {
    use super::*;

    pub async fn poison_plans_are_refused_and_the_cluster_keeps_scheduling(kind: Kind) {
        let s = Server::start(kind).await;
        for (plan, field) in poison_plans() {
            let (status, body) = s.post("/api/v1/plans", plan).await;
            assert_eq!(status, 422, "{field}: {body}");
            assert_eq!(body["field"], field, "{body}");
            let error = body["error"].as_str().unwrap_or_default();
            assert!(error.contains(field), "the message names {field}: {error}");
        }
        let list: PlanList = s.get("/api/v1/plans").await;
        assert_eq!(list.total, 0, "nothing refused was stored");
        // The scheduler is unharmed: a plan at the edge of every bound runs.
        let edge = json!({"name": "edge", "parallel_limit": 1_000_000, "tasks": [
            task(json!({"name": "a", "timeout": "30d", "heartbeat_interval": "1h",
                        "heartbeat_timeout": "1d", "max_attempts": 100})),
            task(json!({"name": "b", "timeout": "100ms", "node": "local",
                        "reassign_after": "365d", "run_at": "1970-01-01T00:00:00Z"})),
        ]});
        let (status, body) = s.post("/api/v1/plans", edge).await;
        assert_eq!(status, 201, "{body}");
        s.wait_plan(body["id"].as_i64().unwrap(), PlanStatus::Done)
            .await;
        let (status, body) = s.get_status("/readyz").await;
        assert_eq!(status, 200, "{body}");
    }

    pub async fn a_loop_failing_every_round_is_named_by_readyz(kind: Kind) {
        let s = Server::start(kind).await;
        let (status, _) = s.get_status("/readyz").await;
        assert_eq!(status, 200);
        // Every claim, promotion and sweep now fails, round after round
        // (a claim that finds the queue of AVAILABLE runs empty reads no
        // other table).
        s.db.execute(
            "ALTER TABLE task_run RENAME TO task_run_away;
             ALTER TABLE available_run RENAME TO available_run_away",
        )
        .await;
        // Loops fall behind one after another; wait for the claimer's turn.
        let body = eventually(
            Duration::from_secs(30),
            "/readyz 503 naming the claimer",
            || async {
                let (status, body) = s.get_status("/readyz").await;
                let claimer = body.to_string().contains(r#""loop":"claimer""#);
                (status == 503 && claimer).then_some(body)
            },
        )
        .await;
        assert_eq!(body["status"], "stalled", "{body}");
        let stalled = body["stalled"].as_array().unwrap();
        let claimer = stalled
            .iter()
            .find(|l| l["loop"] == "claimer")
            .unwrap_or_else(|| panic!("the claimer is named: {body}"));
        let error = claimer["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("task_run") || error.contains("available_run"),
            "its last error: {error}"
        );
        assert!(
            body["error"].as_str().unwrap().contains("claimer"),
            "{body}"
        );
        // Mended, the same loops complete rounds again and work flows.
        s.db.execute(
            "ALTER TABLE task_run_away RENAME TO task_run;
             ALTER TABLE available_run_away RENAME TO available_run",
        )
        .await;
        eventually(Duration::from_secs(30), "/readyz 200", || async {
            (s.get_status("/readyz").await.0 == 200).then_some(())
        })
        .await;
        let (status, body) = s
            .post(
                "/api/v1/plans",
                json!({"name": "after", "tasks": [task(json!({}))]}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        s.wait_plan(body["id"].as_i64().unwrap(), PlanStatus::Done)
            .await;
    }

    /// A command writing one 1 MB line, a NUL byte and 6 MB more: the run
    /// ends DONE, its log holds the cut line and at most `--max-log-bytes`
    /// (2 MiB here; 1 MiB by default) with the cut marked, the NUL as `␀`,
    /// and its page stays small.
    pub async fn hostile_output_is_bounded_and_stored(kind: Kind) {
        let s = Server::start_with(kind, &["--max-log-bytes", "2MiB"]).await;
        let script = "head -c 1000000 /dev/zero | tr '\\0' x; echo; \
            printf 'nul:\\000:end\\n'; \
            yes 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' | head -c 6000000";
        let plan = json!({"name": "loud", "tasks": [
            task(json!({"command": {"argv": ["sh", "-c", script]}}))
        ]});
        let (status, body) = s.post("/api/v1/plans", plan).await;
        assert_eq!(status, 201, "{body}");
        let done = s
            .wait_plan(body["id"].as_i64().unwrap(), PlanStatus::Done)
            .await;
        let run = done.tasks[0].run_id.unwrap();
        let log = s.store.run_log(run).await.unwrap();
        let mut lines = log.lines();
        let first = lines.next().unwrap();
        assert!(
            first.ends_with("[baton: line cut at 16 KiB]"),
            "…{}",
            &first[first.len() - 60..]
        );
        assert!(first.len() < 17 * 1024);
        assert_eq!(lines.next(), Some("nul:\u{2400}:end"));
        assert!(log.len() <= 2 * 1024 * 1024 + 1024, "{} bytes", log.len());
        assert!(
            log.len() > 1024 * 1024,
            "{} bytes: the setting counts",
            log.len()
        );
        assert!(
            log.trim_end().ends_with(
                "this run's log reached 2 MiB (--max-log-bytes); later output is discarded]"
            ),
            "the cut is marked with its cause"
        );
        let page = s
            .http
            .get(format!("{}/runs/{run}", s.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            page.len() < 2_000_000,
            "the run page is {} bytes",
            page.len()
        );
    }

    /// The largest plan the limits allow is submitted, promoted and
    /// canceled in one piece while its runs are being claimed and finished.
    pub async fn the_largest_plan_runs_and_cancels(kind: Kind) {
        let s = Server::start(kind).await;
        let tasks: Vec<_> = (0..baton::plan::limits::MAX_TASKS)
            .map(|i| json!({"name": format!("t{i}"), "target": format!("db/{}", i % 50), "sleep": "0s"}))
            .collect();
        let (status, body) = s
            .post("/api/v1/plans", json!({"name": "largest", "tasks": tasks}))
            .await;
        assert_eq!(status, 201, "{}", body["error"]);
        let id = body["id"].as_i64().unwrap();
        // Let the loops get going on it, then cancel what is left.
        eventually(Duration::from_secs(60), "some tasks DONE", || async {
            let view: domain::model::PlanView = s.get(&format!("/api/v1/plans/{id}")).await;
            let done = view
                .tasks
                .iter()
                .filter(|t| t.status == domain::model::TaskStatus::Done)
                .count();
            (done >= 100).then_some(())
        })
        .await;
        let (status, body) = s.post_empty(&format!("/api/v1/plans/{id}/cancel")).await;
        assert!(
            status == 200 || (status == 409 && body["error"].as_str().unwrap().contains("nothing")),
            "{status}: {body}"
        );
        let view = eventually(Duration::from_secs(60), "the plan settled", || async {
            let view: domain::model::PlanView = s.get(&format!("/api/v1/plans/{id}")).await;
            matches!(view.status, PlanStatus::Canceled | PlanStatus::Done).then_some(view)
        })
        .await;
        assert_eq!(view.tasks.len(), baton::plan::limits::MAX_TASKS);
        s.db.assert_open_task_counts().await;
    }
}

per_backend!(cases:
    poison_plans_are_refused_and_the_cluster_keeps_scheduling,
    a_loop_failing_every_round_is_named_by_readyz,
    hostile_output_is_bounded_and_stored,
    the_largest_plan_runs_and_cancels,
);

/// A loop that panics must not leave a process that holds the lease and
/// answers health checks while scheduling nothing: the process stops with a
/// non-zero exit, so its supervisor restarts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_panicking_loop_stops_the_process_non_zero() {
    let db = TestDb::new(Kind::Sqlite).await;
    db.store().await;
    let port = common::process::free_port();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("serve")
        .env("BATON_DATABASE_URL", db.url())
        .env("BATON_LISTEN", format!("127.0.0.1:{port}"))
        .env("BATON_FAULT", "panic-in-promoter")
        .env("BATON_LOG", "error")
        .stdout(std::process::Stdio::piped())
        // The panic message itself; the log on stdout names the loop.
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start baton");
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("the process stops by itself")
        .unwrap();
    assert!(!status.success(), "exit status {status}");
    let mut out = String::new();
    use tokio::io::AsyncReadExt;
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    assert!(out.contains("promoter"), "the log names the loop: {out}");
}
