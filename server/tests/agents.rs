//! `baton agent` with real processes on one PostgreSQL database
//! (docs/agents.md): agents run what replicas schedule, their runs are
//! resolved when they die, handed back when they stop, and the worker
//! protocol refuses whatever an agent token must not do.

mod common;

use std::time::{Duration, Instant};

use common::process::{
    Agent, Baton, Options, TestCertificate, process_running, ticker_pid, ticker_task,
};
use common::{Kind, TestDb, eventually};
use domain::model::{PlanStatus, PlanView, RunStatus, TaskStatus, TaskView};
use serde_json::{Value, json};
use tokio::sync::{Mutex, MutexGuard};

const STALE_AFTER: Duration = Duration::from_secs(1);
const SWEEP_INTERVAL: Duration = Duration::from_millis(200);
/// Room for process scheduling, database round trips and polling.
const SLACK: Duration = Duration::from_secs(3);

/// Sub-second liveness periods starve each other when several clusters
/// share two cores: one test at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// A replica that schedules and serves but runs nothing itself.
fn scheduler_only() -> Options {
    Options::fast_liveness().env("BATON_WORKERS", "0")
}

/// The turn to run, and a fresh, migrated PostgreSQL database.
async fn fresh_db() -> (MutexGuard<'static, ()>, TestDb) {
    let turn = ONE_AT_A_TIME.lock().await;
    let db = TestDb::new(Kind::Postgres).await;
    db.store().await;
    (turn, db)
}

/// Waits for every task of the plan to be DONE.
async fn plan_done(replica: &Baton, plan_id: i64, within: Duration) -> PlanView {
    eventually(within, "every task DONE", || async move {
        let plan = replica.plan(plan_id).await?;
        (plan.status == PlanStatus::Done).then_some(plan)
    })
    .await
}

async fn task(baton: &Baton, plan_id: i64, name: &str) -> Option<TaskView> {
    let plan = baton.plan(plan_id).await?;
    plan.tasks.into_iter().find(|t| t.name == name)
}

async fn wait_for_task(
    baton: &Baton,
    plan_id: i64,
    name: &str,
    within: Duration,
    what: &str,
    check: impl Fn(&TaskView) -> bool,
) -> TaskView {
    let check = &check;
    eventually(within, what, || async move {
        task(baton, plan_id, name).await.filter(|t| check(t))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_runs_what_the_replicas_schedule() {
    let (_turn, db) = fresh_db().await;
    let replica = Baton::start(db.url(), &scheduler_only()).await;
    let agent = Agent::start(&[&replica], 4, &[]).await;
    assert!(
        agent.agent_id.starts_with("a-anonymous-"),
        "{}",
        agent.agent_id
    );

    let mut tasks: Vec<Value> = (0..20)
        .map(|i| json!({"name": format!("t{i}"), "target": format!("w/{i}"), "sleep": "0s"}))
        .collect();
    tasks.push(json!({"name": "say", "target": "w/say",
        "command": {"argv": ["sh", "-c", "echo hello from the agent; echo to stderr >&2"]}}));
    let plan = replica
        .submit(json!({"name": "remote", "tasks": tasks}))
        .await;
    let done = plan_done(&replica, plan.id, Duration::from_secs(15)).await;
    for task in &done.tasks {
        assert_eq!(
            task.replica_id.as_deref(),
            Some(agent.agent_id.as_str()),
            "{} did not run on the agent",
            task.name
        );
    }
    let say = done.tasks.iter().find(|t| t.name == "say").unwrap();
    let text = run_log(&replica, say.run_id.unwrap()).await.unwrap();
    assert!(text.contains("hello from the agent"), "{text}");
    assert!(text.contains("to stderr"), "{text}");

    // Seen as what it is, through the API and `baton workers`.
    let rows = replica.replicas().await;
    let kind = |id: &str| {
        rows.iter()
            .find(|r| r.replica_id == id)
            .map(|r| r.kind)
            .unwrap_or_else(|| panic!("no row for {id}: {rows:?}"))
    };
    assert_eq!(kind(&agent.agent_id), domain::model::WorkerKind::Agent);
    assert_eq!(
        kind(&replica.replica_id),
        domain::model::WorkerKind::Replica
    );
    let listed = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["workers", "--server", &replica.base])
        .output()
        .unwrap();
    assert!(listed.status.success(), "{listed:?}");
    let listed = String::from_utf8(listed.stdout).unwrap();
    let line = listed
        .lines()
        .find(|l| l.starts_with(&agent.agent_id))
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(line.contains(" agent ") && line.contains("alive"), "{line}");

    // And in /metrics, which any replica answers for every agent.
    let metrics = replica.get_text("/metrics").await.unwrap();
    assert!(
        metrics.contains("baton_agents{alive=\"true\"} 1\n"),
        "{metrics}"
    );
    let running = format!("baton_agent_runs_running{{agent_id=\"{}\"", agent.agent_id);
    assert!(metrics.contains(&running), "{metrics}");
    assert!(
        metrics.contains("baton_replicas{alive=\"true\"} 1\n"),
        "agents are not counted as replicas: {metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_agents_run_is_retried_on_another_agent() {
    let (_turn, db) = fresh_db().await;
    let replica = Baton::start(db.url(), &scheduler_only()).await;
    let mut first = Agent::start(&[&replica], 1, &[]).await;
    let plan = replica
        .submit(json!({"name": "long", "tasks": [
            {"name": "t", "target": "x", "sleep": "60s", "max_attempts": 2}]}))
        .await;
    wait_for_task(
        &replica,
        plan.id,
        "t",
        Duration::from_secs(10),
        "`t` RUNNING on the first agent",
        |t| t.status == TaskStatus::Running && t.replica_id.as_deref() == Some(&first.agent_id),
    )
    .await;
    first.sigkill().await;
    let killed_at = std::time::Instant::now();
    let second = Agent::start(&[&replica], 1, &[]).await;
    let retried = wait_for_task(
        &replica,
        plan.id,
        "t",
        STALE_AFTER + SWEEP_INTERVAL + SLACK,
        "`t`'s retry RUNNING on the second agent",
        |t| t.status == TaskStatus::Running && t.replica_id.as_deref() == Some(&second.agent_id),
    )
    .await;
    assert_eq!(retried.attempt, Some(2), "{retried:?}");
    let first_run = replica
        .get_json(&format!("/api/v1/runs/{}", plan.tasks[0].run_id.unwrap()))
        .await
        .1;
    let error = first_run["error"].as_str().unwrap_or_default().to_owned();
    assert!(error.contains(&first.agent_id), "{first_run}");
    eprintln!("killed agent's run retried after {:?}", killed_at.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_hands_an_agents_runs_back() {
    let (_turn, db) = fresh_db().await;
    let replica = Baton::start(db.url(), &scheduler_only()).await;
    let mut first = Agent::start(&[&replica], 1, &[("BATON_SHUTDOWN_GRACE", "300ms")]).await;
    let plan = replica
        .submit(json!({"name": "long", "tasks": [{"name": "t", "target": "x", "sleep": "60s"}]}))
        .await;
    let running = wait_for_task(
        &replica,
        plan.id,
        "t",
        Duration::from_secs(10),
        "`t` RUNNING on the agent",
        |t| t.status == TaskStatus::Running,
    )
    .await;
    let status = first.sigterm_and_wait(Duration::from_secs(10)).await;
    assert!(status.success(), "{status:?}");
    let back = wait_for_task(
        &replica,
        plan.id,
        "t",
        Duration::from_secs(2),
        "`t` AVAILABLE again",
        |t| t.status == TaskStatus::Available,
    )
    .await;
    assert_eq!(back.run_id, running.run_id, "handed back, same run");
    assert_eq!(back.attempt, Some(1));
    let rows = replica.replicas().await;
    assert!(
        rows.iter().all(|r| r.replica_id != first.agent_id),
        "the agent's row outlived it: {rows:?}"
    );
    let second = Agent::start(&[&replica], 1, &[]).await;
    wait_for_task(
        &replica,
        plan.id,
        "t",
        Duration::from_secs(5),
        "`t` RUNNING on the second agent",
        |t| t.status == TaskStatus::Running && t.replica_id.as_deref() == Some(&second.agent_id),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_with_a_dead_replica_under_its_agent_carries_on() {
    let (_turn, db) = fresh_db().await;
    let mut one = Baton::start(db.url(), &scheduler_only()).await;
    let two = Baton::start(db.url(), &scheduler_only()).await;
    let agent = Agent::start(&[&one, &two], 1, &[]).await;
    let plan = two
        .submit(json!({"name": "p", "tasks": [{"name": "t", "target": "x", "sleep": "4s"}]}))
        .await;
    let running = wait_for_task(
        &two,
        plan.id,
        "t",
        Duration::from_secs(10),
        "`t` RUNNING on the agent",
        |t| t.status == TaskStatus::Running,
    )
    .await;
    // The agent speaks to the first replica (its list's head) until it
    // fails: killed, every call goes to the second.
    one.sigkill().await;
    let done = wait_for_task(
        &two,
        plan.id,
        "t",
        Duration::from_secs(15),
        "`t` DONE",
        |t| {
            matches!(
                t.status,
                TaskStatus::Done | TaskStatus::Failed | TaskStatus::Canceled
            )
        },
    )
    .await;
    assert_eq!(done.status, TaskStatus::Done, "{done:?}");
    assert_eq!(done.run_id, running.run_id, "the same run, never retried");
    assert_eq!(done.attempt, Some(1));
    assert_eq!(done.replica_id.as_deref(), Some(agent.agent_id.as_str()));
}

/// An outside client's `LOCK TABLE` on the runs table, then on the
/// replica table, each held three times `stale_after` (docs/design.md,
/// "Liveness"): the agent's beats wait at the replica behind the lock,
/// as the sweeper does, and count as proof, so its commands are neither
/// stopped by the agent nor failed by the sweeper. Before, the replica
/// answered the agent's held-up beats with a 500, and the agent, without
/// proof, stopped every command it ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn outside_locks_cost_an_agents_runs_nothing() {
    use sqlx::Connection;
    let (_turn, db) = fresh_db().await;
    let one = Baton::start(db.url(), &scheduler_only()).await;
    let two = Baton::start(db.url(), &scheduler_only()).await;
    let agent = Agent::start(&[&one, &two], 2, &[]).await;
    let tasks: Vec<Value> = (0..2)
        .map(|i| {
            json!({"name": format!("t{i}"), "target": format!("db/{i}"), "max_attempts": 1,
                   "command": {"argv": ["sh", "-c", "sleep 10; echo finished"]}})
        })
        .collect();
    let plan = two.submit(json!({"name": "locked", "tasks": tasks})).await;
    let two_ref = &two;
    eventually(
        Duration::from_secs(10),
        "both commands RUNNING on the agent",
        || async move {
            let view = two_ref.plan(plan.id).await?;
            view.tasks
                .iter()
                .all(|t| t.status == TaskStatus::Running)
                .then_some(())
        },
    )
    .await;
    for lock in [
        "LOCK TABLE task_run IN ACCESS EXCLUSIVE MODE",
        "LOCK TABLE replica IN ACCESS EXCLUSIVE MODE",
    ] {
        let mut outside = sqlx::PgConnection::connect(db.url()).await.unwrap();
        let mut tx = outside.begin().await.unwrap();
        sqlx::raw_sql(lock).execute(&mut *tx).await.unwrap();
        tokio::time::sleep(3 * STALE_AFTER).await;
        tx.commit().await.unwrap();
    }
    let done = eventually(Duration::from_secs(20), "the plan ended", || async {
        let view = two.plan(plan.id).await?;
        matches!(view.status, PlanStatus::Done | PlanStatus::Failed).then_some(view)
    })
    .await;
    for task in &done.tasks {
        let run = run_json(&two, task.run_id.unwrap()).await;
        assert_eq!(
            (task.status, task.attempt, task.replica_id.as_deref()),
            (TaskStatus::Done, Some(1), Some(agent.agent_id.as_str())),
            "{} was stopped or failed although its agent lived: {run}",
            task.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pinned_work_goes_to_an_agent_with_its_label_and_is_reassigned_without_one() {
    let (_turn, db) = fresh_db().await;
    let replica = Baton::start(db.url(), &scheduler_only()).await;
    let mut gpu = Agent::start(&[&replica], 2, &[("BATON_LABELS", "gpu")]).await;
    let plain = Agent::start(&[&replica], 2, &[]).await;
    let tasks: Vec<Value> = (0..6)
        .map(|i| {
            json!({"name": format!("g{i}"), "target": format!("g/{i}"), "node": "gpu",
            "reassign_after": "never", "sleep": "0s"})
        })
        .collect();
    let plan = replica
        .submit(json!({"name": "pinned", "tasks": tasks}))
        .await;
    let done = plan_done(&replica, plan.id, Duration::from_secs(10)).await;
    for task in &done.tasks {
        assert_eq!(
            task.replica_id.as_deref(),
            Some(gpu.agent_id.as_str()),
            "{task:?}"
        );
    }

    gpu.sigkill().await;
    // The pin is dropped `reassign_after` after the label was last seen.
    eventually(STALE_AFTER + SLACK, "the gpu agent stale", || async {
        let rows = replica.try_replicas().await?;
        (!rows.iter().any(|r| r.replica_id == gpu.agent_id && r.alive)).then_some(())
    })
    .await;
    // The leader reads live labels at most a heartbeat (200 ms) apart.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let later = replica
        .submit(
            json!({"name": "later", "tasks": [{"name": "t", "target": "g/x",
            "node": "gpu", "reassign_after": "4s", "sleep": "0s"}]}),
        )
        .await;
    let waiting = wait_for_task(
        &replica,
        later.id,
        "t",
        STALE_AFTER + SLACK,
        "`t` waiting for a gpu worker",
        |t| {
            t.waiting_cause
                .as_deref()
                .is_some_and(|c| c.contains("no live replica or agent labelled gpu"))
        },
    )
    .await;
    assert_eq!(waiting.status, TaskStatus::Pending, "{waiting:?}");
    let ran = wait_for_task(
        &replica,
        later.id,
        "t",
        Duration::from_secs(10),
        "`t` DONE once its pin is dropped",
        |t| t.status == TaskStatus::Done,
    )
    .await;
    assert_eq!(ran.replica_id.as_deref(), Some(plain.agent_id.as_str()));
}

/// Waits for the ticker's pid, once its log shows it ticking.
async fn ticking(replica: &Baton, plan_id: i64, pid_file: &std::path::Path) -> (i64, i32) {
    let task = wait_for_task(
        replica,
        plan_id,
        "ticker",
        Duration::from_secs(10),
        "`ticker` RUNNING",
        |t| t.status == TaskStatus::Running,
    )
    .await;
    let run_id = task.run_id.unwrap();
    eventually(Duration::from_secs(10), "ticks in the log", || async move {
        let log = run_log(replica, run_id).await?;
        log.contains("tick 3\n").then_some(())
    })
    .await;
    (run_id, ticker_pid(pid_file))
}

async fn run_log(replica: &Baton, run_id: i64) -> Option<String> {
    replica
        .get_text(&format!("/api/v1/runs/{run_id}/log"))
        .await
}

async fn run_json(replica: &Baton, run_id: i64) -> Value {
    replica.get_json(&format!("/api/v1/runs/{run_id}")).await.1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_agent_is_fenced_out_after_its_run_is_swept() {
    let (_turn, db) = fresh_db().await;
    let replica = Baton::start(db.url(), &scheduler_only()).await;
    let agent = Agent::start(&[&replica], 1, &[]).await;
    let scratch = tempfile::tempdir().unwrap();
    let pid_file = scratch.path().join("ticker.pid");
    let plan = replica
        .submit(json!({"name": "freeze", "tasks": [ticker_task(&pid_file)]}))
        .await;
    let (run_id, pid) = ticking(&replica, plan.id, &pid_file).await;

    agent.sigstop();
    // The command's supervisor hears nothing from the frozen agent and
    // kills it within half of `stale_after`, before the sweep.
    eventually(
        STALE_AFTER + SLACK,
        "the frozen agent's command killed by its supervisor",
        || async { (!process_running(pid)).then_some(()) },
    )
    .await;
    assert_eq!(run_json(&replica, run_id).await["status"], "RUNNING");
    let swept = eventually(
        STALE_AFTER + SWEEP_INTERVAL + SLACK,
        "the frozen agent's run swept",
        || async {
            let run = run_json(&replica, run_id).await;
            (run["status"] != "RUNNING").then_some(run)
        },
    )
    .await;
    assert_eq!(swept["status"], "FAILED", "{swept}");
    assert!(
        swept["error"].as_str().unwrap().contains(&agent.agent_id),
        "the cause names the frozen agent: {swept}"
    );
    let swept_log = run_log(&replica, run_id).await.unwrap();
    agent.sigcont();
    eventually(Duration::from_secs(5), "the agent alive again", || async {
        let rows = replica.try_replicas().await?;
        rows.iter()
            .any(|r| r.replica_id == agent.agent_id && r.alive)
            .then_some(())
    })
    .await;
    // Its buffered ticks and its finish meet the fence: nothing changes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(run_json(&replica, run_id).await, swept);
    assert_eq!(run_log(&replica, run_id).await.unwrap(), swept_log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_cut_off_from_every_replica_stops_its_commands_first() {
    let (_turn, db) = fresh_db().await;
    let reachable = Baton::start(db.url(), &scheduler_only()).await;
    let other = Baton::start(db.url(), &scheduler_only()).await;
    // It knows only the first replica.
    let agent = Agent::start(&[&reachable], 1, &[]).await;
    let scratch = tempfile::tempdir().unwrap();
    let pid_file = scratch.path().join("ticker.pid");
    let plan = other
        .submit(json!({"name": "cut", "tasks": [ticker_task(&pid_file)]}))
        .await;
    let (run_id, pid) = ticking(&other, plan.id, &pid_file).await;

    reachable.sigstop();
    let cut_at = Instant::now();
    eventually(
        STALE_AFTER + SLACK,
        "the cut-off agent's command stopped",
        || async { (!process_running(pid)).then_some(()) },
    )
    .await;
    let stopped_after = cut_at.elapsed();
    // Stopped by the agent itself, while the run was still its own: no
    // sweeper (the other replica leads within a lease) had failed it yet.
    assert_eq!(
        run_json(&other, run_id).await["status"],
        "RUNNING",
        "the command outlived the run ({stopped_after:?})"
    );
    let swept = eventually(
        Duration::from_secs(1) + STALE_AFTER + SWEEP_INTERVAL + SLACK,
        "the cut-off agent's run swept",
        || async {
            let run = run_json(&other, run_id).await;
            (run["status"] != "RUNNING").then_some(run)
        },
    )
    .await;
    assert_eq!(swept["status"], "FAILED", "{swept}");
    // Back in touch, the agent carries on and takes new work.
    reachable.sigcont();
    let next = other
        .submit(json!({"name": "after", "tasks": [{"name": "t", "target": "u", "sleep": "0s"}]}))
        .await;
    let done = wait_for_task(
        &other,
        next.id,
        "t",
        Duration::from_secs(10),
        "`t` DONE",
        |t| t.status == TaskStatus::Done,
    )
    .await;
    assert_eq!(done.replica_id.as_deref(), Some(agent.agent_id.as_str()));
}

/// A users file with an operator and an agent allowed the label `gpu`.
struct Secured {
    _dir: tempfile::TempDir,
    users_file: std::path::PathBuf,
    replica: Baton,
    http: reqwest::Client,
    operator: &'static str,
    agent: &'static str,
}

const OPERATOR_TOKEN: &str = "baton_operator_token_for_tests_0001";
const AGENT_TOKEN: &str = "baton_agent_token_for_tests_000001";

/// The users file: the operator, and the agent `build` (labels `gpu`)
/// when `agent` names its token.
fn users_file(operator: &str, agent: Option<&str>) -> String {
    let hash = |t: &str| baton::auth::token_hash(t).to_text();
    let mut text = format!(
        "users:\n  - name: olga\n    role: operator\n    token_hashes: [\"{}\"]\n",
        hash(operator)
    );
    if let Some(agent) = agent {
        text.push_str(&format!(
            "agents:\n  - name: build\n    labels: [gpu]\n    token_hashes: [\"{}\"]\n",
            hash(agent)
        ));
    }
    text
}

async fn secured(db: &TestDb) -> Secured {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.yaml");
    std::fs::write(&path, users_file(OPERATOR_TOKEN, Some(AGENT_TOKEN))).unwrap();
    let replica = Baton::start(
        db.url(),
        &scheduler_only()
            .env("BATON_USERS_FILE", path.to_str().unwrap())
            .env("BATON_TOKEN", OPERATOR_TOKEN),
    )
    .await;
    Secured {
        _dir: dir,
        users_file: path,
        replica,
        http: reqwest::Client::new(),
        operator: OPERATOR_TOKEN,
        agent: AGENT_TOKEN,
    }
}

impl Secured {
    async fn post(
        &self,
        path: &str,
        token: Option<&str>,
        protocol: &str,
        body: Value,
    ) -> (u16, Value) {
        let mut request = self
            .http
            .post(format!("{}/api/v1/worker/{path}", self.replica.base))
            .header("baton-worker-protocol", protocol)
            .json(&body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or_default())
    }

    async fn hello(&self, labels: Value) -> (u16, Value) {
        let body = json!({"protocol": 1, "hostname": "box", "labels": labels,
            "version": "test", "workers": 2});
        self.post("hello", Some(self.agent), "1", body).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_worker_protocol_refuses_what_an_agent_token_must_not_do() {
    let (_turn, db) = fresh_db().await;
    let s = secured(&db).await;
    let error = |body: &Value| body["error"].as_str().unwrap_or_default().to_owned();

    // Only an agent token opens the protocol, and it opens nothing else.
    let hello =
        json!({"protocol": 1, "hostname": "box", "labels": [], "version": "t", "workers": 1});
    let (status, body) = s.post("hello", None, "1", hello.clone()).await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = s.post("hello", Some(s.operator), "1", hello.clone()).await;
    assert_eq!(status, 401, "{body}");
    assert!(error(&body).contains("not an agent token"), "{body}");
    let plans = s
        .http
        .get(format!("{}/api/v1/plans", s.replica.base))
        .bearer_auth(s.agent)
        .send()
        .await
        .unwrap();
    assert_eq!(plans.status().as_u16(), 401);
    let body: Value = plans.json().await.unwrap();
    assert!(
        error(&body).contains("only use the worker protocol"),
        "{body}"
    );

    // Labels beyond the token's, and another protocol, are refused by name.
    let (status, body) = s.hello(json!(["gpu", "eu"])).await;
    assert_eq!(status, 403, "{body}");
    assert!(error(&body).contains("not [eu]"), "{body}");
    let (status, body) = s.post("hello", Some(s.agent), "2", hello.clone()).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        error(&body).contains("protocol 1") && error(&body).contains("`2`"),
        "{body}"
    );

    // Two agents of the same token; the first takes a run pinned to gpu.
    let (status, one) = s.hello(json!(["gpu"])).await;
    assert_eq!(status, 200, "{one}");
    let one = one["agent_id"].as_str().unwrap().to_owned();
    assert!(one.starts_with("a-build-"), "{one}");
    let (_, two) = s.hello(json!([])).await;
    let two = two["agent_id"].as_str().unwrap().to_owned();
    let plan = s
        .replica
        .submit(json!({"name": "p", "tasks": [
            {"name": "t", "target": "x", "sleep": "0s", "node": "gpu"}]}))
        .await;
    let (status, taken) = s
        .post(
            "take",
            Some(s.agent),
            "1",
            json!({"agent_id": "a-other-00000000",
            "labels": [], "slots": 1, "wait_ms": 0}),
        )
        .await;
    assert_eq!(status, 403, "another token's agent id: {taken}");
    let (status, taken) = s
        .post(
            "take",
            Some(s.agent),
            "1",
            json!({"agent_id": one,
            "labels": ["gpu"], "slots": 5, "wait_ms": 5000}),
        )
        .await;
    assert_eq!(status, 200, "{taken}");
    let runs = taken["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{taken}");
    let run_id = runs[0]["id"].as_i64().unwrap();
    assert_eq!(Some(run_id), plan.tasks[0].run_id);

    // Another agent's finish is fenced: nothing recorded.
    let finish = |agent: &str| {
        json!({"agent_id": agent, "finishes": [
            {"run_id": run_id, "status": "DONE", "result_code": 0, "error": null}]})
    };
    let (status, report) = s.post("finish", Some(s.agent), "1", finish(&two)).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["fenced"], json!([run_id]), "{report}");
    let still = task(&s.replica, plan.id, "t").await.unwrap();
    assert_eq!(still.status, TaskStatus::Running, "{still:?}");
    let (_, beaten) = s
        .post(
            "runs/beat",
            Some(s.agent),
            "1",
            json!({"agent_id": two,
            "beats": [{"run_id": run_id, "timeout_ms": 5000}]}),
        )
        .await;
    assert_eq!(
        beaten["owned"],
        json!([]),
        "not the second agent's: {beaten}"
    );

    // Bad input is named and changes nothing.
    let (status, body) = s
        .post(
            "finish",
            Some(s.agent),
            "1",
            json!({"agent_id": one, "finishes": [
            {"run_id": run_id, "status": "PENDING", "result_code": null, "error": null}]}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["field"], "finishes[0].status", "{body}");

    let (status, report) = s.post("finish", Some(s.agent), "1", finish(&one)).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["finished"], json!([run_id]), "{report}");
    let run = s
        .replica
        .get_json(&format!("/api/v1/runs/{run_id}"))
        .await
        .1;
    assert_eq!(run["status"], json!(RunStatus::Done.as_str()), "{run}");
    assert_eq!(run["replica_id"], json!(one), "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_revoked_agent_token_stops_its_agent_and_its_run_ends_as_if_it_died() {
    let (_turn, db) = fresh_db().await;
    let s = secured(&db).await;
    let mut agent = Agent::start_labelled(
        &[&s.replica],
        1,
        &[("BATON_AGENT_TOKEN", AGENT_TOKEN)],
        "gpu",
    )
    .await;
    assert!(agent.agent_id.starts_with("a-build-"), "{}", agent.agent_id);
    let scratch = tempfile::tempdir().unwrap();
    let pid_file = scratch.path().join("ticker.pid");
    let plan = s
        .replica
        .submit(json!({"name": "revoked", "tasks": [ticker_task(&pid_file)]}))
        .await;
    let (run_id, pid) = ticking(&s.replica, plan.id, &pid_file).await;

    // Revoked: the entry goes from the file the replica reads.
    std::fs::write(&s.users_file, users_file(OPERATOR_TOKEN, None)).unwrap();
    let revoked_at = Instant::now();
    let status = tokio::time::timeout(Duration::from_secs(2) + SLACK, agent.wait())
        .await
        .expect("the agent exits once its token is refused");
    assert!(!status.success(), "{status:?}");
    eventually(Duration::from_secs(2), "the command stopped", || async {
        (!process_running(pid)).then_some(())
    })
    .await;
    let swept = eventually(
        STALE_AFTER + SWEEP_INTERVAL + SLACK,
        "the revoked agent's run swept",
        || async {
            let run = run_json(&s.replica, run_id).await;
            (run["status"] != "RUNNING").then_some(run)
        },
    )
    .await;
    assert_eq!(swept["status"], "FAILED", "{swept}");
    assert!(
        swept["error"].as_str().unwrap().contains(&agent.agent_id),
        "{swept}"
    );
    eprintln!(
        "revoked run swept {:?} after the file changed",
        revoked_at.elapsed()
    );
    // The token opens nothing now.
    let (status, body) = s.hello(json!([])).await;
    assert_eq!(status, 401, "{body}");
    // Its secret reached no page or metric an operator reads.
    for path in ["/metrics", "/api/v1/replicas", "/replicas"] {
        let text = s.replica.get_text(path).await.unwrap_or_default();
        assert!(!text.is_empty(), "{path} answered nothing");
        assert!(!text.contains(AGENT_TOKEN), "{path} shows the agent token");
    }
}

/// Bad settings stop `baton agent` before it reaches anything, naming
/// the setting; a replica that never answers keeps it trying, and a stop
/// signal still ends it cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_refuses_bad_settings_and_waits_out_an_absent_replica() {
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
            .arg("agent")
            .args(args)
            .env_remove("BATON_AGENT_SERVER")
            .output()
            .unwrap()
    };
    for (args, says) in [
        (vec!["--server", "ftp://box"], "http:// or https://"),
        (vec!["--server", "http://u:p@box:3000"], "credentials"),
        (vec!["--server", "not a url"], "is not a URL"),
        (
            vec!["--server", "http://127.0.0.1:1", "--workers", "0"],
            "--workers must be from 1",
        ),
        (
            vec!["--server", "http://127.0.0.1:1", "--labels", "a b,\u{1}"],
            "--labels",
        ),
        (
            vec![
                "--server",
                "https://127.0.0.1:1",
                "--ca-cert",
                "/nonexistent/ca.pem",
            ],
            "--ca-cert `/nonexistent/ca.pem` cannot be read",
        ),
    ] {
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    let out = run(&[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--server"));

    // Nothing listens on port 1: the agent says hello again and again,
    // and SIGTERM ends it with success (it held no run).
    let mut waiting = tokio::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["agent", "--server", "http://127.0.0.1:1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(waiting.try_wait().unwrap().is_none(), "it gave up");
    let pid = waiting.id().unwrap() as i32;
    // SAFETY: our child, not reaped yet.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(Duration::from_secs(5), waiting.wait())
        .await
        .expect("it stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");
}

/// `baton serve` with a certificate, started apart so its refusal can be
/// read: stderr once it exits (it must, before touching anything).
fn serve_refusal(env: &[(&str, &str)]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("serve")
        .env("BATON_DATABASE_URL", "sqlite:///nonexistent/dir/baton.db")
        .env("BATON_LISTEN", "127.0.0.1:0")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{env:?} was accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_reaches_a_replica_over_https_trusting_its_own_ca() {
    let (_turn, db) = fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let tls = TestCertificate::new(dir.path());
    let (cert, key, ca) = (
        tls.cert.to_str().unwrap(),
        tls.key.to_str().unwrap(),
        tls.ca_cert.to_str().unwrap(),
    );

    // Half a pair, a file that is no certificate, a key of another
    // certificate: each refused by name before the database is opened.
    let says = serve_refusal(&[("BATON_TLS_CERT", cert)]);
    assert!(
        says.contains("--tls-key") || says.contains("tls_key"),
        "{says}"
    );
    let says = serve_refusal(&[("BATON_TLS_CERT", "/etc/hostname"), ("BATON_TLS_KEY", key)]);
    assert!(says.contains("BATON_TLS_CERT `/etc/hostname`"), "{says}");
    let wrong_key = tls.ca_key.to_str().unwrap();
    let says = serve_refusal(&[("BATON_TLS_CERT", cert), ("BATON_TLS_KEY", wrong_key)]);
    assert!(says.contains("does not fit the certificate"), "{says}");

    let options = scheduler_only()
        .tls(&tls)
        .env("BATON_HTTP_HEADER_TIMEOUT", "1s");
    let replica = Baton::start(db.url(), &options).await;
    assert!(replica.base.starts_with("https://"), "{}", replica.base);
    // Plain HTTP to the HTTPS port gets no answer.
    let plain = replica.base.replacen("https://", "http://", 1);
    assert!(reqwest::get(format!("{plain}/healthz")).await.is_err());
    // A connection that never starts its handshake is closed after the
    // header timeout, as a silent plain one is.
    let address = plain.trim_start_matches("http://");
    let mut silent = tokio::net::TcpStream::connect(address).await.unwrap();
    let opened = Instant::now();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::io::AsyncReadExt::read(&mut silent, &mut byte),
    )
    .await
    .expect("the silent connection is closed within 10 s");
    assert_eq!(read.unwrap_or(0), 0, "closed without a byte");
    assert!(
        opened.elapsed() >= Duration::from_millis(900),
        "{:?}",
        opened.elapsed()
    );

    // Without the CA the agent cannot say hello (it keeps trying, and
    // holds nothing): the certificate is checked, not waved through.
    let mut untrusting = tokio::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["agent", "--server", &replica.base, "--labels", "untrusting"])
        .env("BATON_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    let agent = Agent::start(&[&replica], 2, &[("BATON_CA_CERT", ca)]).await;
    let plan = replica
        .submit(json!({"name": "over-tls", "tasks": [
            {"name": "hello", "target": "tls/a", "command": {"argv": ["echo", "through rustls"]}},
        ]}))
        .await;
    let done = plan_done(&replica, plan.id, Duration::from_secs(20)).await;
    let hello = &done.tasks[0];
    assert_eq!(hello.replica_id.as_deref(), Some(agent.agent_id.as_str()));
    let log = run_log(&replica, hello.run_id.unwrap()).await.unwrap();
    assert!(log.contains("through rustls"), "{log}");

    let listed = replica.replicas().await;
    assert!(
        !listed
            .iter()
            .any(|r| r.labels.contains(&"untrusting".to_owned())),
        "an agent that cannot check the certificate said hello: {listed:?}"
    );
    untrusting.start_kill().unwrap();
    let out = untrusting.wait_with_output().await.unwrap();
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(
        log.contains("invalid peer certificate"),
        "the agent's log does not say why: {log}"
    );
}

/// Drains, from the API and from the CLI: a drained replica and a drained
/// agent take no new run, finish the one they run, and their runs go
/// elsewhere; a resume lets them take again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drained_workers_finish_what_they_run_and_take_nothing_new() {
    let (_turn, db) = fresh_db().await;
    let replica = Baton::start(db.url(), &Options::fast_liveness()).await;
    let agent = Agent::start(&[&replica], 1, &[]).await;

    let path = |id: &str, verb: &str| format!("/api/v1/replicas/{id}/{verb}");
    let (status, body) = replica
        .post_json(&path(&replica.replica_id, "drain"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["draining_by"], "anonymous");
    assert!(body["draining_since"].is_string(), "{body}");
    let (status, body) = replica
        .post_json(&path(&replica.replica_id, "drain"), None)
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(body["error"].as_str().unwrap().contains("already draining"));
    let (status, body) = replica.post_json(&path("r-nobody", "drain"), None).await;
    assert_eq!(status, 404, "{body}");
    // One heartbeat for the replica to read it back.
    tokio::time::sleep(Duration::from_millis(600)).await;

    // The drained replica leaves the work to the agent.
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("ticker.pid");
    let long = replica
        .submit(json!({"name": "long", "tasks": [ticker_task(&pid_file)]}))
        .await;
    let ticker = wait_for_task(
        &replica,
        long.id,
        "ticker",
        Duration::from_secs(10),
        "the ticker RUNNING",
        |t| t.status == TaskStatus::Running,
    )
    .await;
    assert_eq!(ticker.replica_id.as_deref(), Some(agent.agent_id.as_str()));

    // Drain the agent from the CLI while it runs.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args([
            "workers",
            "drain",
            &agent.agent_id,
            "--server",
            &replica.base,
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("draining (by anonymous)"), "{stdout}");
    let listed = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["workers", "--server", &replica.base])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(
        listed.matches("draining (by anonymous)").count(),
        2,
        "{listed}"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;

    // Nobody takes new work now.
    let quick = replica
        .submit(json!({"name": "quick", "tasks": [
            {"name": "q", "target": "q", "sleep": "0s"},
        ]}))
        .await;
    tokio::time::sleep(SLACK).await;
    let q = task(&replica, quick.id, "q").await.unwrap();
    assert_eq!(q.status, TaskStatus::Available, "{q:?}");
    assert_eq!(q.replica_id, None, "{q:?}");

    // The agent's run was not disturbed: still RUNNING there, attempt 1,
    // its command alive; it ends DONE when the ticker is stopped.
    let ticker = task(&replica, long.id, "ticker").await.unwrap();
    if ticker.status != TaskStatus::Running {
        // Which rule ended it, with its history, for a failure seen once
        // in CI and not since.
        let run = replica
            .get_json(&format!("/api/v1/runs/{}", ticker.run_id.unwrap()))
            .await;
        panic!("the agent's run was disturbed: {ticker:?}\n{run:#?}");
    }
    assert_eq!(ticker.replica_id.as_deref(), Some(agent.agent_id.as_str()));
    assert_eq!(ticker.attempt, Some(1));
    assert!(process_running(ticker_pid(&pid_file)));
    // SAFETY: a pid the ticker wrote, checked alive just now.
    unsafe { libc::kill(ticker_pid(&pid_file), libc::SIGTERM) };
    let ended = wait_for_task(
        &replica,
        long.id,
        "ticker",
        Duration::from_secs(10),
        "the ticker to end",
        |t| t.status != TaskStatus::Running,
    )
    .await;
    assert_eq!(ended.replica_id.as_deref(), Some(agent.agent_id.as_str()));
    assert_eq!(ended.attempt, Some(1), "{ended:?}");

    // Resuming the replica lets it take the waiting run.
    let (status, body) = replica
        .post_json(&path(&replica.replica_id, "resume"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["draining_since"].is_null(), "{body}");
    let done = plan_done(&replica, quick.id, Duration::from_secs(10)).await;
    assert_eq!(
        done.tasks[0].replica_id.as_deref(),
        Some(replica.replica_id.as_str())
    );
}
