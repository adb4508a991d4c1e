//! Liveness with real `baton serve` processes on one PostgreSQL database
//! (docs/design.md, "Liveness"; invariants 4, 6 and 7): what happens to
//! work when a replica is killed, frozen, loses the leader lease, carries
//! no label a task needs, or is asked to stop.
//!
//! The processes run with liveness periods shrunk to fractions of a second,
//! so every wait below is bounded by a few of those periods plus slack.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use baton::store::Store;
use common::process::{Baton, Options, process_running, ticker_pid, ticker_task};
use common::{Kind, TestDb, eventually};
use domain::model::{PlanStatus, RunStatus, RunView, TaskStatus, TaskView};
use serde_json::json;
use tokio::sync::{Mutex, MutexGuard};

const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(200);
const STALE_AFTER: Duration = Duration::from_secs(1);
const SWEEP_INTERVAL: Duration = Duration::from_millis(200);
const LEADER_LEASE: Duration = Duration::from_secs(1);
/// Room for process scheduling, database round trips and polling.
const SLACK: Duration = Duration::from_secs(2);

/// The bounds below are a few hundred milliseconds wide: several clusters
/// at once on a two-core machine would starve each other's heartbeats and
/// see live replicas swept. One cluster at a time keeps them meaningful.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

fn fast_liveness() -> Options {
    Options::default()
        .env("BATON_HEARTBEAT_INTERVAL", &millis(HEARTBEAT_INTERVAL))
        .env("BATON_STALE_AFTER", &millis(STALE_AFTER))
        .env("BATON_SWEEP_INTERVAL", &millis(SWEEP_INTERVAL))
        .env("BATON_LEADER_LEASE", &millis(LEADER_LEASE))
        .env("BATON_POLL_INTERVAL", "100ms")
}

/// A duration as the `BATON_*` variables take it.
fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// Processes on one fresh database, plus a store of the test's own to look
/// at that database directly. Fields drop in order: processes first.
struct Cluster {
    batons: Vec<Baton>,
    store: Arc<dyn Store>,
    db: TestDb,
    _turn: MutexGuard<'static, ()>,
}

impl Cluster {
    async fn start(n: usize, options: &Options) -> Cluster {
        let turn = ONE_AT_A_TIME.lock().await;
        let db = TestDb::new(Kind::Postgres).await;
        // Migrate once up front so the processes do not race on first start.
        let store = db.store().await;
        let mut batons = Vec::new();
        for _ in 0..n {
            batons.push(Baton::start(db.url(), options).await);
        }
        Cluster {
            batons,
            store,
            db,
            _turn: turn,
        }
    }

    fn position(&self, replica_id: &str) -> usize {
        self.batons
            .iter()
            .position(|b| b.replica_id == replica_id)
            .unwrap_or_else(|| panic!("no process of ours is replica {replica_id}"))
    }

    fn get(&self, replica_id: &str) -> &Baton {
        &self.batons[self.position(replica_id)]
    }

    /// Takes a process out of the cluster, to kill or stop it.
    fn take(&mut self, replica_id: &str) -> Baton {
        let at = self.position(replica_id);
        self.batons.remove(at)
    }

    fn replica_ids(&self) -> Vec<String> {
        self.batons.iter().map(|b| b.replica_id.clone()).collect()
    }
}

/// Polls one task of a plan through `baton`'s API until `check` holds.
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
        let plan = baton.plan(plan_id).await?;
        let task = plan.tasks.into_iter().find(|t| t.name == name)?;
        check(&task).then_some(task)
    })
    .await
}

/// Polls a run in the database until `check` holds.
async fn wait_for_run(
    store: &dyn Store,
    run_id: i64,
    within: Duration,
    what: &str,
    check: impl Fn(&RunView) -> bool,
) -> RunView {
    let check = &check;
    eventually(within, what, || async move {
        let run = store.run_get(run_id).await.ok()?;
        check(&run).then_some(run)
    })
    .await
}

fn running(t: &TaskView) -> bool {
    t.status == TaskStatus::Running
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_of_a_replica_fails_its_run_and_a_survivor_retries_it() {
    let mut c = Cluster::start(3, &fast_liveness()).await;
    let plan = c.batons[0]
        .submit(json!({"name": "crash", "tasks": [{
            "name": "long", "target": "t", "max_attempts": 2,
            // Only the first attempt hangs; the retry proves the task can
            // still finish elsewhere.
            "command": {"argv": ["sh", "-c",
                "if [ \"$BATON_ATTEMPT\" = 1 ]; then sleep 30; fi; echo ok"]},
        }]}))
        .await;
    let first = wait_for_task(
        &c.batons[0],
        plan.id,
        "long",
        Duration::from_secs(10),
        "`long` RUNNING",
        running,
    )
    .await;
    let first_run = first.run_id.expect("a run");
    let victim_id = first.replica_id.clone().expect("a replica");
    let mut victim = c.take(&victim_id);

    let killed_at = Instant::now();
    victim.sigkill().await;
    let limit = STALE_AFTER + SWEEP_INTERVAL + SLACK;
    let failed = wait_for_run(
        c.store.as_ref(),
        first_run,
        limit + Duration::from_secs(5),
        "the killed replica's run FAILED",
        |r| r.status != RunStatus::Running,
    )
    .await;
    let took = killed_at.elapsed();
    assert_eq!(failed.status, RunStatus::Failed, "{failed:#?}");
    assert!(
        took <= limit,
        "swept {took:?} after the kill; invariant 6 (docs/design.md) allows {limit:?}"
    );
    // The cause names the dead replica and its last heartbeat, which the
    // row it left behind still holds.
    let last_beat = c
        .store
        .replica_list()
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.info.replica_id == victim_id)
        .expect("a killed replica's row stays until pruned")
        .last_heartbeat;
    assert_eq!(
        failed.error.as_deref(),
        Some(
            format!(
                "replica {victim_id} stopped heart-beating at {}",
                last_beat.clock()
            )
            .as_str()
        ),
    );
    let sweep = failed.events.last().expect("events");
    assert_eq!(
        (sweep.from, sweep.to, sweep.actor.as_str()),
        (Some(RunStatus::Running), RunStatus::Failed, "scheduler")
    );

    // Retry backoff is 1 s after a first failure.
    let retried = wait_for_task(
        &c.batons[0],
        plan.id,
        "long",
        Duration::from_secs(15),
        "the second attempt DONE",
        |t| t.status == TaskStatus::Done,
    )
    .await;
    assert_eq!(retried.attempt, Some(2));
    assert_ne!(retried.run_id, Some(first_run));
    let survivor = retried.replica_id.expect("a replica");
    assert!(
        c.replica_ids().contains(&survivor),
        "retried on {survivor}, not on a survivor (killed: {victim_id})"
    );
    let log = c.store.run_log(retried.run_id.unwrap()).await.unwrap();
    assert_eq!(log, "ok\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_replica_is_fenced_out_after_its_run_is_swept() {
    let c = Cluster::start(2, &fast_liveness()).await;
    let scratch = tempfile::tempdir().unwrap();
    let pid_file = scratch.path().join("ticker.pid");
    let plan = c.batons[0]
        .submit(json!({"name": "freeze", "tasks": [ticker_task(&pid_file)]}))
        .await;
    let task = wait_for_task(
        &c.batons[0],
        plan.id,
        "ticker",
        Duration::from_secs(10),
        "`ticker` RUNNING",
        running,
    )
    .await;
    let run_id = task.run_id.expect("a run");
    let paused = c.get(task.replica_id.as_deref().expect("a replica"));
    let store = c.store.as_ref();
    // Lines reaching the log show the replica was writing before it froze.
    eventually(Duration::from_secs(10), "ticks in the log", || async move {
        let log = store.run_log(run_id).await.ok()?;
        log.contains("tick 3\n").then_some(())
    })
    .await;
    let pid = ticker_pid(&pid_file);

    paused.sigstop();
    // The command's supervisor hears nothing from the frozen replica and
    // kills it within half of `stale_after`: before the sweeper can fail
    // the run and a retry could start beside it.
    let frozen_at = Instant::now();
    eventually(
        STALE_AFTER + SLACK,
        "the frozen replica's command killed by its supervisor",
        || async { (!process_running(pid)).then_some(()) },
    )
    .await;
    let killed_after = frozen_at.elapsed();
    assert_eq!(
        store.run_get(run_id).await.unwrap().status,
        RunStatus::Running,
        "killed {killed_after:?} into the freeze, before the sweep"
    );
    // If the frozen replica led, another one must first take the lease.
    let swept = wait_for_run(
        store,
        run_id,
        LEADER_LEASE + STALE_AFTER + SWEEP_INTERVAL + SLACK + Duration::from_secs(5),
        "the frozen replica's run swept",
        |r| r.status != RunStatus::Running,
    )
    .await;
    let swept_log = store.run_log(run_id).await.unwrap();
    assert_eq!(swept.status, RunStatus::Failed, "{swept:#?}");
    let error = swept.error.clone().unwrap_or_default();
    assert!(
        error.contains(&paused.replica_id),
        "the cause names the frozen replica {}: {error}",
        paused.replica_id
    );
    paused.sigcont();
    eventually(
        Duration::from_secs(5),
        "the resumed replica alive again, running nothing",
        || async {
            let me = paused
                .try_replicas()
                .await?
                .into_iter()
                .find(|r| r.replica_id == paused.replica_id)?;
            (me.alive && me.running == 0).then_some(())
        },
    )
    .await;
    // The resumed replica had ticks buffered and its execution ended
    // (killed): it tries to store the ticks at once, and the fence must
    // turn them away with nothing (no finish) after. Absence can only be
    // observed over a while: give it ten of its heartbeat periods.
    tokio::time::sleep(10 * HEARTBEAT_INTERVAL).await;
    assert_eq!(store.run_get(run_id).await.unwrap(), swept);
    assert_eq!(store.run_log(run_id).await.unwrap(), swept_log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_leader_moves_leadership_and_work_continues() {
    let mut c = Cluster::start(3, &fast_liveness()).await;
    let first = &c.batons[0];
    let leader_id = eventually(Duration::from_secs(10), "exactly one leader", || async {
        let replicas = first.try_replicas().await?;
        let leaders: Vec<_> = replicas.into_iter().filter(|r| r.leader).collect();
        (leaders.len() == 1).then(|| leaders[0].replica_id.clone())
    })
    .await;
    // Pinned to the leader, so the leader's death also leaves a run for
    // the next leader's sweeper.
    let held = first
        .submit(json!({"name": "on-the-leader", "tasks": [{
            "name": "held", "target": "t",
            "node": c.get(&leader_id).label, "reassign_after": "never",
            "command": {"argv": ["sleep", "20"]},
        }]}))
        .await;
    let task = wait_for_task(
        first,
        held.id,
        "held",
        Duration::from_secs(10),
        "`held` RUNNING",
        running,
    )
    .await;
    assert_eq!(task.replica_id.as_deref(), Some(leader_id.as_str()));
    let held_run = task.run_id.expect("a run");

    let mut leader = c.take(&leader_id);
    let killed_at = Instant::now();
    leader.sigkill().await;
    let survivors = &c.batons;
    let new_leader = eventually(
        LEADER_LEASE + SLACK,
        "a surviving replica to lead",
        || async {
            let replicas = survivors[0].try_replicas().await?;
            let leaders: Vec<_> = replicas.into_iter().filter(|r| r.leader).collect();
            (leaders.len() == 1 && leaders[0].replica_id != leader_id)
                .then(|| leaders[0].replica_id.clone())
        },
    )
    .await;
    assert!(
        c.replica_ids().contains(&new_leader),
        "{new_leader} is not a survivor"
    );
    let seen_by_other: Vec<_> = survivors[1]
        .replicas()
        .await
        .into_iter()
        .filter(|r| r.leader)
        .map(|r| r.replica_id)
        .collect();
    assert_eq!(seen_by_other, vec![new_leader.clone()]);

    // The new leader sweeps: the old leader's run fails, naming it.
    let limit = LEADER_LEASE + STALE_AFTER + SWEEP_INTERVAL + SLACK;
    let swept = wait_for_run(
        c.store.as_ref(),
        held_run,
        limit,
        "the killed leader's run FAILED",
        |r| r.status != RunStatus::Running,
    )
    .await;
    assert_eq!(swept.status, RunStatus::Failed);
    assert!(
        swept
            .error
            .as_deref()
            .unwrap_or_default()
            .contains(&leader_id),
        "{:?}",
        swept.error
    );
    assert!(killed_at.elapsed() <= limit);

    // The new leader promotes: a fresh plan completes on the survivors.
    let tasks: Vec<_> = (0..4)
        .map(|i| json!({"name": format!("x-{i}"), "target": format!("t/{i}"), "sleep": "100ms"}))
        .collect();
    let after = survivors[1]
        .submit(json!({"name": "after", "tasks": tasks}))
        .await;
    let done = eventually(Duration::from_secs(10), "the new plan DONE", || async {
        let plan = survivors[0].plan(after.id).await?;
        (plan.status == PlanStatus::Done).then_some(plan)
    })
    .await;
    for task in &done.tasks {
        let ran_on = task.replica_id.clone().expect("a replica");
        assert!(c.replica_ids().contains(&ran_on), "{task:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pinned_work_waits_with_a_cause_then_is_reassigned() {
    let mut c = Cluster::start(2, &fast_liveness()).await;
    let submitted_at = Instant::now();
    let plan = c.batons[0]
        .submit(json!({"name": "pinned", "tasks": [
            {"name": "gpu-job", "target": "t/1", "node": "gpu", "reassign_after": "3s",
                "sleep": "0s"},
            {"name": "gpu-only", "target": "t/2", "node": "gpu", "reassign_after": "never",
                "command": {"argv": ["echo", "ran on gpu"]}},
        ]}))
        .await;
    let api = &c.batons[0];
    let waiting = wait_for_task(
        api,
        plan.id,
        "gpu-job",
        Duration::from_secs(5),
        "`gpu-job` waiting for its node",
        |t| {
            t.waiting_cause
                .as_deref()
                .is_some_and(|c| c.contains("no live replica or agent labelled gpu"))
        },
    )
    .await;
    assert_eq!(waiting.status, TaskStatus::Pending);

    let done = wait_for_task(
        api,
        plan.id,
        "gpu-job",
        Duration::from_secs(15),
        "`gpu-job` DONE once its pin is dropped",
        |t| t.status == TaskStatus::Done,
    )
    .await;
    assert!(
        submitted_at.elapsed() >= Duration::from_secs(3),
        "the pin held for reassign_after"
    );
    assert!(c.replica_ids().contains(done.replica_id.as_ref().unwrap()));
    let run = c.store.run_get(done.run_id.unwrap()).await.unwrap();
    let unpinned = run
        .events
        .iter()
        .find(|e| e.from == Some(RunStatus::Pending) && e.to == RunStatus::Pending)
        .unwrap_or_else(|| panic!("no PENDING → PENDING event: {:#?}", run.events));
    let detail = unpinned.detail.as_deref().unwrap_or_default();
    assert!(detail.starts_with("pin to node gpu dropped"), "{detail}");

    // `never` keeps the pin however long the node is away…
    let kept = c.batons[0]
        .plan(plan.id)
        .await
        .unwrap()
        .tasks
        .into_iter()
        .find(|t| t.name == "gpu-only")
        .unwrap();
    assert_eq!(kept.status, TaskStatus::Pending);
    let cause = kept.waiting_cause.unwrap_or_default();
    assert!(
        cause.contains("no live replica or agent labelled gpu"),
        "{cause}"
    );
    assert!(cause.contains("pinned for good"), "{cause}");

    // …and a replica carrying the label, started later, picks it up.
    let gpu = Baton::start(c.db.url(), &fast_liveness().label("gpu")).await;
    let gpu_id = gpu.replica_id.clone();
    c.batons.push(gpu);
    let ran = wait_for_task(
        &c.batons[0],
        plan.id,
        "gpu-only",
        Duration::from_secs(10),
        "`gpu-only` DONE on the gpu replica",
        |t| t.status == TaskStatus::Done,
    )
    .await;
    assert_eq!(ran.replica_id, Some(gpu_id));
    let log = c.store.run_log(ran.run_id.unwrap()).await.unwrap();
    assert_eq!(log, "ran on gpu\n");
}

/// A replica started with no workers (`BATON_WORKERS=0`) schedules, leads
/// and serves, and runs nothing: its promotion rounds claim no run for
/// it, so every run goes to a replica with workers, and with none left a
/// run waits AVAILABLE rather than start.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_without_workers_schedules_and_runs_nothing() {
    let mut c = Cluster::start(0, &fast_liveness()).await;
    // Started first, so it takes the leader's lease.
    let scheduler = Baton::start(c.db.url(), &fast_liveness().env("BATON_WORKERS", "0")).await;
    let scheduler_id = scheduler.replica_id.clone();
    c.batons.push(scheduler);
    eventually(
        Duration::from_secs(5),
        "the worker-less replica leads",
        || {
            let api = &c.batons[0];
            let id = &scheduler_id;
            async move {
                let replicas = api.try_replicas().await?;
                replicas
                    .iter()
                    .any(|r| &r.replica_id == id && r.leader)
                    .then_some(())
            }
        },
    )
    .await;
    // Ready for a load balancer's traffic like any replica.
    let (ready, body) = c.batons[0].get_json("/readyz").await;
    assert!(ready.is_success(), "{body}");
    let worker = Baton::start(c.db.url(), &fast_liveness()).await;
    let worker_id = worker.replica_id.clone();
    c.batons.push(worker);

    let tasks: Vec<_> = (0..20)
        .map(|i| json!({"name": format!("t{i}"), "target": format!("w/{i}"), "sleep": "0s"}))
        .collect();
    let plan = c.batons[0]
        .submit(json!({"name": "spread", "tasks": tasks}))
        .await;
    let done = eventually(Duration::from_secs(10), "every task DONE", || {
        let api = &c.batons[0];
        async move {
            let plan = api.plan(plan.id).await?;
            (plan.status == PlanStatus::Done).then_some(plan)
        }
    })
    .await;
    for task in &done.tasks {
        assert_eq!(
            task.replica_id.as_deref(),
            Some(worker_id.as_str()),
            "{} ran on the replica without workers",
            task.name
        );
    }

    // Without the worker, a run is promoted and waits.
    let mut gone = c.take(&worker_id);
    gone.sigterm_and_wait(Duration::from_secs(10)).await;
    let lone = c.batons[0]
        .submit(json!({"name": "lone", "tasks": [{"name": "t", "target": "w/x", "sleep": "0s"}]}))
        .await;
    let waiting = wait_for_task(
        &c.batons[0],
        lone.id,
        "t",
        Duration::from_secs(5),
        "`t` AVAILABLE",
        |t| t.status == TaskStatus::Available,
    )
    .await;
    tokio::time::sleep(SLACK).await;
    let still = c.batons[0].plan(lone.id).await.unwrap();
    let task = still.tasks.iter().find(|t| t.name == "t").unwrap();
    assert_eq!(task.status, TaskStatus::Available, "{task:?}");
    assert_eq!(task.run_id, waiting.run_id);
    assert_eq!(task.replica_id, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_hands_running_work_back_and_exits_zero() {
    let grace = Duration::from_secs(1);
    let mut c = Cluster::start(
        2,
        &fast_liveness().env("BATON_SHUTDOWN_GRACE", &millis(grace)),
    )
    .await;
    let plan = c.batons[0]
        .submit(json!({"name": "handover", "tasks": [{
            "name": "slow", "target": "t", "max_attempts": 1,
            "command": {"argv": ["sh", "-c", "sleep 5; echo finished"]},
        }]}))
        .await;
    let task = wait_for_task(
        &c.batons[0],
        plan.id,
        "slow",
        Duration::from_secs(10),
        "`slow` RUNNING",
        running,
    )
    .await;
    let run_id = task.run_id.expect("a run");
    let leaving_id = task.replica_id.clone().expect("a replica");
    let mut leaving = c.take(&leaving_id);
    let staying_id = c.batons[0].replica_id.clone();

    let status = leaving.sigterm_and_wait(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(0), "baton exited with {status}");
    let rows = c.store.replica_list().await.unwrap();
    assert!(
        rows.iter().all(|r| r.info.replica_id != leaving_id),
        "the stopped replica removed its heartbeat row: {rows:?}"
    );
    let handed = c.store.run_get(run_id).await.unwrap();
    let back = handed
        .events
        .iter()
        .find(|e| e.from == Some(RunStatus::Running) && e.to == RunStatus::Available)
        .unwrap_or_else(|| panic!("no RUNNING → AVAILABLE event: {:#?}", handed.events));
    assert_eq!(back.replica_id.as_deref(), Some(leaving_id.as_str()));
    let detail = back.detail.as_deref().unwrap_or_default();
    assert!(detail.contains("handed back"), "{detail}");

    // The same run, same attempt, finishes on the other replica.
    let done = wait_for_run(
        c.store.as_ref(),
        run_id,
        Duration::from_secs(15),
        "the handed-back run DONE",
        |r| matches!(r.status, RunStatus::Done | RunStatus::Failed),
    )
    .await;
    assert_eq!(done.status, RunStatus::Done, "{done:#?}");
    assert_eq!(done.attempt, 1);
    assert_eq!(done.replica_id.as_deref(), Some(staying_id.as_str()));
    let task = c.batons[0].plan(plan.id).await.unwrap().tasks.remove(0);
    assert_eq!(task.run_id, Some(run_id), "no new run was created");
    assert_eq!(c.store.run_log(run_id).await.unwrap(), "finished\n");
}

/// Invariant 4 for the processes Baton starts, not only for rows: across
/// rounds of SIGKILL and of SIGSTOP longer than `stale_after`, no two
/// executions of one task overlap in time. Each execution appends its
/// start and a tick every 100 ms to a file outside the database; an
/// execution that outlived its replica would keep ticking after its retry
/// began.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_command_runs_beside_its_retry_across_kills_and_freezes() {
    let mut c = Cluster::start(2, &fast_liveness()).await;
    let scratch = tempfile::tempdir().unwrap();
    let record = scratch.path().join("executions");
    let tasks: Vec<_> = (0..6)
        .map(|i| {
            json!({
                "name": format!("step-{i}"), "target": format!("t{i}"), "max_attempts": 10,
                "command": {
                    "argv": ["sh", "-c", "echo \"$TASK $BATON_RUN_ID start $(date +%s%N)\" >> \"$RECORD\"; \
                        i=0; while [ $i -lt 40 ]; do \
                        echo \"$TASK $BATON_RUN_ID tick $(date +%s%N)\" >> \"$RECORD\"; \
                        i=$((i+1)); sleep 0.1; done"],
                    "env": {"TASK": format!("step-{i}"), "RECORD": record.to_str().unwrap()},
                },
            })
        })
        .collect();
    let plan = c.batons[0]
        .submit(json!({"name": "rounds", "tasks": tasks}))
        .await;
    for round in 0..4 {
        // A live replica of ours that is running something now.
        let (watcher, ours) = (&c.batons[0], c.replica_ids());
        let ours = &ours;
        let victim_id = eventually(Duration::from_secs(30), "a RUNNING task", || async move {
            let view = watcher.plan(plan.id).await?;
            view.tasks
                .iter()
                .filter(|t| t.status == TaskStatus::Running)
                .filter_map(|t| t.replica_id.clone())
                .find(|r| ours.contains(r))
        })
        .await;
        // Let its commands get going before the fault.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut victim = c.take(&victim_id);
        if round % 2 == 0 {
            victim.sigkill().await;
        } else {
            victim.sigstop();
            tokio::time::sleep(STALE_AFTER * 3).await;
            victim.sigcont();
            // Its runs were swept meanwhile; it carries on as a replica.
        }
        c.batons.push(if round % 2 == 0 {
            Baton::start(c.db.url(), &fast_liveness()).await
        } else {
            victim
        });
    }
    let watcher = &c.batons[0];
    eventually(Duration::from_secs(120), "the plan DONE", || async move {
        let view = watcher.plan(plan.id).await?;
        (view.status == PlanStatus::Done).then_some(())
    })
    .await;
    // Any orphan still ticking would add lines after the plan ended.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let text = std::fs::read_to_string(&record).unwrap();
    // task -> run -> (first, last) instant in nanoseconds
    let mut spans: std::collections::BTreeMap<
        String,
        std::collections::BTreeMap<i64, (u128, u128)>,
    > = Default::default();
    for line in text.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        let [task, run, _, at] = parts[..] else {
            panic!("a torn line: {line:?}");
        };
        let (run, at): (i64, u128) = (run.parse().unwrap(), at.parse().unwrap());
        let span = spans
            .entry(task.to_owned())
            .or_default()
            .entry(run)
            .or_insert((at, at));
        span.0 = span.0.min(at);
        span.1 = span.1.max(at);
    }
    assert_eq!(spans.len(), 6, "every task ran");
    let retried = spans.values().filter(|runs| runs.len() > 1).count();
    assert!(retried >= 2, "the faults hit running commands: {spans:?}");
    for (task, runs) in &spans {
        let mut ordered: Vec<_> = runs.iter().collect();
        ordered.sort_by_key(|(_, (first, _))| *first);
        for pair in ordered.windows(2) {
            let ((a, (_, a_last)), (b, (b_first, _))) = (pair[0], pair[1]);
            assert!(
                a_last < b_first,
                "{task}: run {a} still ran {} ms after run {b} started",
                (a_last - b_first) / 1_000_000
            );
        }
    }
}

/// A replica cut off from the database by the network keeps running, but
/// stops its executions before the others may sweep and retry them, and
/// rejoins cleanly when the network heals (issue 19, item 3). The cut-off
/// replica reaches PostgreSQL through a proxy that stops relaying bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partitioned_replica_stops_its_commands_before_their_retry() {
    let mut c = Cluster::start(1, &fast_liveness()).await;
    let proxy = common::proxy::Proxy::start(common::proxy::upstream_of(c.db.url())).await;
    let cut = Baton::start(&proxy.route(c.db.url()), &fast_liveness().label("cut")).await;
    let scratch = tempfile::tempdir().unwrap();
    let record = scratch.path().join("ticks");
    let plan = c.batons[0]
        .submit(json!({"name": "partition", "tasks": [{
            "name": "ticker", "target": "t", "max_attempts": 3,
            // Runs on the replica about to be cut off; any replica may
            // take it a second after that one is last seen.
            "node": "cut", "reassign_after": "1s",
            "command": {
                "argv": ["sh", "-c", "i=0; while [ $i -lt 40 ]; do \
                    echo \"$BATON_RUN_ID $(date +%s%N)\" >> \"$RECORD\"; i=$((i+1)); sleep 0.1; done"],
                "env": {"RECORD": record.to_str().unwrap()},
            },
        }]}))
        .await;
    let task = wait_for_task(
        &c.batons[0],
        plan.id,
        "ticker",
        Duration::from_secs(10),
        "`ticker` RUNNING on the replica to be cut off",
        running,
    )
    .await;
    assert_eq!(task.replica_id.as_deref(), Some(cut.replica_id.as_str()));
    let first_run = task.run_id.unwrap();
    let ticks = |run: i64| {
        std::fs::read_to_string(&record)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(r, _)| r.parse::<i64>().ok() == Some(run))
            .map(|(_, at)| at.parse::<u128>().unwrap())
            .collect::<Vec<_>>()
    };
    eventually(
        Duration::from_secs(10),
        "ticks from the first run",
        || async { (ticks(first_run).len() >= 3).then_some(()) },
    )
    .await;

    proxy.blackhole();
    let swept = wait_for_run(
        c.store.as_ref(),
        first_run,
        LEADER_LEASE + STALE_AFTER + SWEEP_INTERVAL + SLACK + Duration::from_secs(5),
        "the cut-off replica's run swept",
        |r| r.status != RunStatus::Running,
    )
    .await;
    assert_eq!(swept.status, RunStatus::Failed, "{swept:#?}");
    let done = wait_for_task(
        &c.batons[0],
        plan.id,
        "ticker",
        Duration::from_secs(30),
        "the retry DONE on the replica still connected",
        |t| t.status == TaskStatus::Done,
    )
    .await;
    assert_eq!(
        done.replica_id.as_deref(),
        Some(c.batons[0].replica_id.as_str())
    );
    let (before, after) = (ticks(first_run), ticks(done.run_id.unwrap()));
    let (last, first) = (*before.iter().max().unwrap(), *after.iter().min().unwrap());
    assert!(
        last < first,
        "the cut-off run ticked {} ms into its retry",
        (last - first) / 1_000_000
    );

    // Healed, the replica rejoins; what it held back (its stopped run's
    // finish, log lines) is fenced out, so the history stays as it was.
    proxy.heal();
    eventually(
        Duration::from_secs(20),
        "the healed replica alive",
        || async {
            let me = c.batons[0]
                .replicas()
                .await
                .into_iter()
                .find(|r| r.replica_id == cut.replica_id)?;
            (me.alive && me.running == 0).then_some(())
        },
    )
    .await;
    tokio::time::sleep(10 * HEARTBEAT_INTERVAL).await;
    assert_eq!(c.store.run_get(first_run).await.unwrap(), swept);
    c.batons.push(cut);
}

/// A finish that has to wait (here on the plan's row, locked as a frozen
/// replica's open transaction would hold it) must not hold up the run
/// heartbeats of the replica's other runs: once it did, the sweeper failed
/// a run that was still executing and its retry ran beside it (found by
/// the chaos schedule).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_finish_waiting_on_a_lock_does_not_starve_run_heartbeats() {
    let c = Cluster::start(1, &fast_liveness()).await;
    let plan = c.batons[0]
        .submit(json!({"name": "locked", "start": false, "tasks": [
            {"name": "quick", "target": "a", "command": {"argv": ["true"]}},
            {"name": "long", "target": "b",
             "command": {"argv": ["sh", "-c", "sleep 4; echo done"]}},
        ]}))
        .await;
    let pool = sqlx::PgPool::connect(c.db.url()).await.unwrap();
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("SELECT id FROM plan WHERE id = $1 FOR UPDATE")
        .bind(plan.id)
        .execute(&mut *holder)
        .await
        .unwrap();
    let r = reqwest::Client::new()
        .post(format!("{}/api/v1/plans/{}/run", c.batons[0].base, plan.id))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let long = wait_for_task(
        &c.batons[0],
        plan.id,
        "long",
        Duration::from_secs(10),
        "`long` RUNNING",
        running,
    )
    .await;
    let run_id = long.run_id.unwrap();
    // `quick` is done and its finish waits on the lock, for longer than
    // the run heartbeat timeout.
    tokio::time::sleep(STALE_AFTER * 3).await;
    let run = c.store.run_get(run_id).await.unwrap();
    assert_eq!(run.status, RunStatus::Running, "{run:#?}");
    holder.commit().await.unwrap();
    let done = wait_for_task(
        &c.batons[0],
        plan.id,
        "long",
        Duration::from_secs(15),
        "`long` DONE",
        |t| t.status == TaskStatus::Done,
    )
    .await;
    assert_eq!(done.attempt, Some(1));
    assert_eq!(c.store.run_log(run_id).await.unwrap(), "done\n");
}

/// A leader cut off from the database by the network (its calls hang, not
/// fail) stops leading before its lease can expire, and leads again once
/// the network heals (issue 19, item 3; `pg_restart.rs` shows the same
/// for a stopped database, where calls fail at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partitioned_leader_steps_down_before_its_lease_expires() {
    use baton::loops::LeaderLease;
    use tokio_util::sync::CancellationToken;

    let _turn = ONE_AT_A_TIME.lock().await;
    let db = TestDb::new(Kind::Postgres).await;
    db.store().await;
    let proxy = common::proxy::Proxy::start(common::proxy::upstream_of(db.url())).await;
    let store = baton::store::connect(&proxy.route(db.url())).await.unwrap();
    let ttl = Duration::from_secs(3);
    let (lease, leadership) = LeaderLease::new(store.clone(), "r-cut".into(), ttl);
    let shutdown = CancellationToken::new();
    let looping = tokio::spawn(lease.run(shutdown.clone()));
    eventually(Duration::from_secs(10), "leadership", || async {
        leadership.is_leader().then_some(())
    })
    .await;
    // Renewals now hang. The last one may have landed just before the cut,
    // so the lease stays valid for up to `ttl` from here.
    let cut = Instant::now();
    proxy.blackhole();
    eventually(ttl, "stepping down", || async {
        (!leadership.is_leader()).then_some(())
    })
    .await;
    let stepped_down = cut.elapsed();
    assert!(
        stepped_down < ttl,
        "stepped down {stepped_down:?} after the cut"
    );
    proxy.heal();
    eventually(Duration::from_secs(15), "leading again", || async {
        leadership.is_leader().then_some(())
    })
    .await;
    shutdown.cancel();
    looping.await.unwrap();
}

/// Counts executions instead of running anything.
struct Counted(Arc<std::sync::atomic::AtomicUsize>);

#[async_trait::async_trait]
impl baton::executor::Executor for Counted {
    async fn execute(
        &self,
        _: &serde_json::Value,
        _: &baton::executor::RunContext,
    ) -> baton::executor::Outcome {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        baton::executor::Outcome::done(None)
    }
}

/// One replica's claimer behind a proxy to the test database, and one
/// AVAILABLE run for it to claim.
struct ProxiedClaim {
    _db: TestDb,
    direct: Arc<dyn Store>,
    proxy: common::proxy::Proxy,
    claimer: baton::loops::Claimer,
    /// What the replica heartbeat loop proves; the tests prove it by hand.
    ownership: Arc<baton::loops::Ownership>,
    /// Executions of the run, counted by its executor.
    executions: Arc<std::sync::atomic::AtomicUsize>,
    run: i64,
}

impl ProxiedClaim {
    async fn new(config: &baton::loops::SchedulerConfig) -> Self {
        use baton::loops::{Claimer, DatabaseLedger, Worker};
        use domain::gates::NodeLabels;

        let db = TestDb::new(Kind::Postgres).await;
        let direct = db.store().await;
        let proxy = common::proxy::Proxy::start(common::proxy::upstream_of(db.url())).await;
        let store = baton::store::connect(&proxy.route(db.url())).await.unwrap();
        let executions = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut registry = baton::executor::Registry::builtin();
        registry.register("sleep", Counted(executions.clone()));
        let worker = Arc::new(Worker::new(
            DatabaseLedger::over(store.clone()),
            "r-late".into(),
            registry,
            config,
        ));
        let ownership = worker.ownership();
        let claimer = Claimer::new(DatabaseLedger::over(store), worker, Vec::new(), config);
        let plan = direct
            .plan_insert(
                &common::plan(json!({"name": "late", "tasks": [
                    {"name": "t", "target": "a", "sleep": "0s"}]})),
                "test".into(),
                common::now(),
            )
            .await
            .unwrap();
        direct
            .run_promote_round(&NodeLabels::default(), None, common::now())
            .await
            .unwrap();
        let run = direct.plan_get(plan).await.unwrap().tasks[0]
            .run_id
            .unwrap();
        ProxiedClaim {
            _db: db,
            direct,
            proxy,
            claimer,
            ownership,
            executions,
            run,
        }
    }

    fn executions(&self) -> usize {
        self.executions.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits for the run to be handed back unexecuted by the claim's
    /// replica, and checks it was not executed meanwhile.
    async fn expect_handed_back(&self) {
        let back = eventually(SLACK, "the run handed back", || async {
            let r = self.direct.run_get(self.run).await.unwrap();
            (r.status == RunStatus::Available).then_some(r)
        })
        .await;
        assert_eq!(back.attempt, 1);
        let events = self.direct.event_list(0, 100).await.unwrap();
        let handed = events
            .iter()
            .find(|e| {
                e.run_id == self.run
                    && e.to == RunStatus::Available
                    && e.from == Some(RunStatus::Running)
            })
            .expect("a hand-back event");
        assert!(
            handed.detail.as_deref().unwrap_or("").contains("too late"),
            "{handed:?}"
        );
        tokio::time::sleep(HEARTBEAT_INTERVAL * 2).await;
        assert_eq!(self.executions(), 0, "a late-claimed run was executed");
    }
}

/// A claim whose answer comes back after the run's heartbeat deadline
/// (a slow link between the replica and the database) proves nothing
/// about who owns the run any more: the sweeper may already have failed
/// it and its retry be running elsewhere. The replica starts none of it
/// and hands the run back (fenced, so a swept run stays swept). Once the
/// replica executed such runs, timing their ownership from the late
/// answer, beside their retries (found by the chaos schedule, seed
/// 1102322328102059040).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_answered_too_late_starts_nothing() {
    use common::proxy::Link;

    let _turn = ONE_AT_A_TIME.lock().await;
    let config = baton::loops::SchedulerConfig {
        heartbeat_interval: HEARTBEAT_INTERVAL,
        stale_after: STALE_AFTER,
        ..baton::loops::SchedulerConfig::default()
    };
    let c = ProxiedClaim::new(&config).await;

    // The claim is several round trips (begin, lock, claim, commit): at
    // this delay its answer comes seconds after the run heartbeat deadline
    // it set (stale_after + 2 beats from the claim's start).
    c.proxy.set(Link::Delay(Duration::from_millis(400)));
    let started = Instant::now();
    // What the replica heartbeat loop records before each claim: without
    // it the claimer takes nothing (the replica could be swept any time).
    c.ownership.proven(started);
    assert_eq!(
        c.claimer.run_once().await.unwrap(),
        1,
        "the claim took the run"
    );
    let took = started.elapsed();
    assert!(
        took > STALE_AFTER + 2 * HEARTBEAT_INTERVAL,
        "answered after {took:?}"
    );
    c.proxy.heal();
    c.expect_handed_back().await;

    // The same replica, answered in time, runs it.
    c.ownership.proven(Instant::now());
    assert_eq!(c.claimer.run_once().await.unwrap(), 1);
    eventually(SLACK, "executed once", || async {
        (c.executions() == 1).then_some(())
    })
    .await;
}

/// A claim answered in time for its run's own deadline, but after the
/// replica's proof lapsed and a late heartbeat answer had restored it:
/// during the lapse the sweeper may have failed the run on the replica's
/// stale row and started its retry elsewhere. The replica starts none of
/// it. (The chaos harness, seed 9642077719060433162, saw such a run
/// started 2.5 s late beside its retry: the spawn asked only whether the
/// replica was provable *now*.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_straddling_a_lapse_of_the_replicas_proof_starts_nothing() {
    use common::proxy::Link;

    let _turn = ONE_AT_A_TIME.lock().await;
    let stale_after = Duration::from_secs(2);
    let config = baton::loops::SchedulerConfig {
        heartbeat_interval: HEARTBEAT_INTERVAL,
        stale_after,
        ..baton::loops::SchedulerConfig::default()
    };
    let c = ProxiedClaim::new(&config).await;
    let proven = Instant::now();
    c.ownership.proven(proven);
    // Three quarters of stale_after after the last recorded heartbeat.
    let lapse = proven + stale_after * 3 / 4;
    // Every packet 100 ms late: the claim's round trips take some 400 ms
    // or more, far inside its run's own deadline (3/4 of 2.4 s).
    c.proxy.set(Link::Delay(Duration::from_millis(100)));
    tokio::time::sleep_until((lapse - Duration::from_millis(100)).into()).await;
    let ownership = c.ownership.clone();
    let late_heartbeat = tokio::spawn(async move {
        tokio::time::sleep_until((lapse + Duration::from_millis(50)).into()).await;
        // A heartbeat sent before the lapse, answered after it.
        ownership.proven(lapse - Duration::from_millis(10));
        assert!(ownership.provable(), "the late answer proves the replica");
        Instant::now()
    });
    let sent = Instant::now();
    assert_eq!(
        c.claimer.run_once().await.unwrap(),
        1,
        "the claim took the run"
    );
    let answered = Instant::now();
    let restored = late_heartbeat.await.unwrap();
    assert!(sent < lapse, "the claim was sent while the proof held");
    assert!(
        restored < answered,
        "the lapse ended {:?} before the claim was answered",
        answered.saturating_duration_since(restored)
    );
    assert!(
        answered - sent < config.run_heartbeat_timeout() * 3 / 4,
        "answered after {:?}: within the run's own deadline",
        answered - sent
    );
    c.proxy.heal();
    c.expect_handed_back().await;
}
