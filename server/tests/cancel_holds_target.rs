//! Cancel holds the target (docs/design.md, "Operator actions"), with real
//! `baton serve` processes on one PostgreSQL database: a cancel of a
//! RUNNING run lets nothing start on its target until the execution is
//! known dead — confirmed by its replica's finish, or, when that replica
//! is frozen, by the sweeper once it is stale (by then its supervisor has
//! killed the command). Before the rule the run was CANCELED at once and
//! the next task on its target could start beside a command still dying,
//! or one whose replica was frozen and had not heard of the cancel.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::process::{Baton, Options, process_running};
use common::{Kind, TestDb, eventually};
use domain::model::{RunStatus, TaskStatus, TaskView};
use serde_json::json;
use tokio::sync::Mutex;

/// Room for process scheduling, database round trips and polling.
const SLACK: Duration = Duration::from_secs(3);
/// `Options::fast_liveness`'s.
const STALE_AFTER: Duration = Duration::from_secs(1);

/// Bounds of a few hundred milliseconds: one cluster at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// A plan of `long` (a command that writes its pid, then sleeps; three
/// attempts) and `next` on the same exclusive target.
fn long_then_next(name: &str, pid_file: &Path) -> serde_json::Value {
    json!({"name": name, "tasks": [
        {"name": "long", "target": name, "max_attempts": 3,
         "command": {"argv": ["sh", "-c", "echo $$ > \"$PID_FILE\"; exec sleep 60"],
                     "env": {"PID_FILE": pid_file.to_str().unwrap()}}},
        {"name": "next", "target": name, "max_attempts": 1, "command": {"argv": ["true"]}},
    ]})
}

async fn task(baton: &Baton, plan: i64, name: &str) -> Option<TaskView> {
    baton
        .plan(plan)
        .await?
        .tasks
        .into_iter()
        .find(|t| t.name == name)
}

/// Two replicas on a fresh database running `long_then_next`, once `long`
/// runs and its command wrote its pid.
struct Scene {
    store: std::sync::Arc<dyn baton::store::Store>,
    batons: [Baton; 2],
    plan: i64,
    long: TaskView,
    pid: i32,
    _scratch: tempfile::TempDir,
    _db: TestDb,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl Scene {
    async fn start(name: &str) -> Scene {
        let turn = ONE_AT_A_TIME.lock().await;
        let db = TestDb::new(Kind::Postgres).await;
        let store = db.store().await;
        let fast = Options::fast_liveness();
        let batons = [
            Baton::start(db.url(), &fast).await,
            Baton::start(db.url(), &fast).await,
        ];
        let scratch = tempfile::tempdir().unwrap();
        let pid_file = scratch.path().join("long.pid");
        let plan = batons[0].submit(long_then_next(name, &pid_file)).await.id;
        let long = eventually(Duration::from_secs(10), "`long` RUNNING", || async {
            let t = task(&batons[0], plan, "long").await?;
            (t.status == TaskStatus::Running).then_some(t)
        })
        .await;
        let pid = eventually(Duration::from_secs(10), "the command's pid", || async {
            std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok()
        })
        .await;
        Scene {
            store,
            batons,
            plan,
            long,
            pid,
            _scratch: scratch,
            _db: db,
            _turn: turn,
        }
    }

    /// The replica that runs `long`.
    fn owner(&self) -> &Baton {
        let owner = self.long.replica_id.as_deref().unwrap();
        self.batons.iter().find(|b| b.replica_id == owner).unwrap()
    }

    /// The other replica, through which the cancel is asked.
    fn asker(&self) -> &Baton {
        let owner = self.long.replica_id.as_deref().unwrap();
        self.batons.iter().find(|b| b.replica_id != owner).unwrap()
    }

    async fn cancel_long(&self) {
        let (status, body) = self
            .asker()
            .post_json(&format!("/api/v1/tasks/{}/cancel", self.long.id), None)
            .await;
        assert!(status.is_success(), "{status}: {body}");
    }

    /// `next` DONE, and only after `long`'s run ended at `ended`; `long`
    /// ended CANCELED on its first attempt, not retried.
    async fn next_ran_after(&self, ended: chrono::DateTime<chrono::Utc>) {
        let next = eventually(Duration::from_secs(10), "`next` DONE", || async {
            let t = task(self.asker(), self.plan, "next").await?;
            (t.status == TaskStatus::Done).then_some(t)
        })
        .await;
        assert!(next.started_at.unwrap() >= ended);
        let long = task(self.asker(), self.plan, "long").await.unwrap();
        assert_eq!(
            (long.status, long.run_id, long.attempt),
            (TaskStatus::Canceled, self.long.run_id, Some(1))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_frees_the_target_only_once_the_owner_killed_the_command() {
    let scene = Scene::start("killed").await;
    let (store, pid) = (scene.store.as_ref(), scene.pid);
    let owner = scene.owner().replica_id.clone();

    // Asked through the replica that does not run it: the owner hears it
    // by NOTIFY, kills the command and confirms.
    scene.cancel_long().await;
    let run_id = scene.long.run_id.unwrap();
    let canceled = eventually(Duration::from_secs(5), "`long` CANCELED", || async {
        let run = store.run_get(run_id).await.ok()?;
        (run.status == RunStatus::Canceled).then_some(run)
    })
    .await;
    assert!(
        !process_running(pid),
        "the run was recorded CANCELED while its command (pid {pid}) still ran"
    );
    let by = canceled.cancel_requested_by.clone().expect("who asked");
    let last = canceled.events.last().unwrap();
    assert_eq!(
        (last.from, last.actor.as_str(), last.replica_id.as_deref()),
        (Some(RunStatus::Running), by.as_str(), Some(owner.as_str())),
        "the owner confirmed the kill in the name of who asked"
    );
    assert_eq!(canceled.error, Some(format!("canceled by {by}")));

    // Only then does `next` get the target; `long` is not retried.
    scene.next_ran_after(canceled.finished_at.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_owners_canceled_run_holds_its_target_until_the_owner_is_stale() {
    let scene = Scene::start("frozen").await;
    let (store, pid, plan) = (scene.store.as_ref(), scene.pid, scene.plan);
    let (owner, asker) = (scene.owner(), scene.asker());
    let owner_id = owner.replica_id.clone();
    let run_id = scene.long.run_id.unwrap();

    owner.sigstop();
    let frozen_at = Instant::now();
    scene.cancel_long().await;
    // The frozen owner cannot confirm: the run stays RUNNING, asked to
    // cancel, and `next` waits, while the command may still be alive.
    let asked = store.run_get(run_id).await.unwrap();
    assert_eq!(asked.status, RunStatus::Running);
    assert!(asked.cancel_requested_by.is_some());
    tokio::time::sleep(STALE_AFTER / 4).await;
    let next = task(asker, plan, "next").await.unwrap();
    assert_eq!(next.status, TaskStatus::Pending, "{next:?}");
    // The dashboard says so, on the plan's page, the run's and the runs
    // search; the search's API answer names who asked.
    let by = asked.cancel_requested_by.clone().unwrap();
    let (_, found) = asker.get_json("/api/v1/runs?status=RUNNING").await;
    assert_eq!(
        found["runs"][0]["cancel_requested_by"],
        by.as_str(),
        "{found}"
    );
    for page in [
        format!("/plans/{plan}"),
        format!("/runs/{run_id}"),
        "/runs?status=RUNNING".to_owned(),
    ] {
        let html = reqwest::get(format!("{}{page}", asker.base))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            html.contains(&format!("data-canceling-by=\"{by}\"")) && html.contains(">canceling<"),
            "{page} does not show the run as canceling"
        );
    }

    // Its supervisor kills the command within half of `stale_after`; once
    // the owner is stale the sweeper ends the run CANCELED, not FAILED,
    // and never retries it.
    let canceled = eventually(
        Duration::from_secs(1) + STALE_AFTER + SLACK + Duration::from_secs(5),
        "`long` ended",
        || async {
            let run = store.run_get(run_id).await.ok()?;
            (run.status != RunStatus::Running).then_some(run)
        },
    )
    .await;
    let took = frozen_at.elapsed();
    assert_eq!(canceled.status, RunStatus::Canceled, "{canceled:#?}");
    assert!(
        !process_running(pid),
        "the frozen replica's command still ran after {took:?}"
    );
    let error = canceled.error.clone().unwrap();
    assert!(
        error.starts_with(&format!(
            "canceled by {}; replica {owner_id} stopped heart-beating",
            canceled.cancel_requested_by.as_deref().unwrap()
        )),
        "{error}"
    );
    scene.next_ran_after(canceled.finished_at.unwrap()).await;

    // The owner, thawed, is fenced out: nothing it writes changes the run.
    owner.sigcont();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(store.run_get(run_id).await.unwrap(), canceled);
}
