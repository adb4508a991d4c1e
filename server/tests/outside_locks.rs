//! A database nobody could write to is no evidence against a replica
//! (docs/design.md, "Liveness"): real `baton serve` processes on one
//! PostgreSQL database while an outside client holds `LOCK TABLE` on the
//! runs table, then on the replica table, then one replica's row, one
//! run's row and the leader lease's row `FOR UPDATE`, each for three
//! times `stale_after`.
//! Heartbeats wait behind those locks, and so does the sweeper; every command, started
//! before the locks, must finish DONE on its first attempt, and `/readyz`
//! must answer within a second throughout.
//!
//! Before the rule, replicas stopped their own commands once their
//! heartbeats had waited three quarters of `stale_after`, and the sweeper
//! failed the rest as "run heartbeat missed" the moment the lock went.
//! The same holds while an outside client kills every connection again
//! and again, and the API answers 503 meanwhile, never 500; and on
//! SQLite while another program holds the database's write lock. In
//! process, a run's row locked while its finish waits: the replica's one
//! slot goes to the next run, and no further.

mod common;

use std::time::{Duration, Instant};

use common::process::{Baton, Options};
use common::{Kind, TestDb, eventually, kill_other_connections};
use domain::model::{PlanStatus, RunStatus, TaskStatus};
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

/// Two replicas on a fresh database, running commands that sleep (a
/// number of seconds each) and print "finished", one attempt each.
struct Scene {
    db: TestDb,
    store: std::sync::Arc<dyn baton::store::Store>,
    batons: [Baton; 2],
    plan: i64,
    /// The plan once every command runs.
    running: domain::model::PlanView,
}

impl Scene {
    /// `n` commands of `secs` each.
    async fn start(name: &str, n: usize, secs: u32) -> Scene {
        Scene::start_with(name, &vec![secs; n], Options::fast_liveness()).await
    }

    async fn start_with(name: &str, secs: &[u32], fast: Options) -> Scene {
        let db = TestDb::new(Kind::Postgres).await;
        let store = db.store().await;
        let batons = [
            Baton::start(db.url(), &fast).await,
            Baton::start(db.url(), &fast).await,
        ];
        let tasks: Vec<_> = secs
            .iter()
            .enumerate()
            .map(|(i, secs)| {
                json!({"name": format!("t{i}"), "target": format!("db/{i}"), "max_attempts": 1,
                       "command": {"argv": ["sh", "-c", format!("sleep {secs}; echo finished")]}})
            })
            .collect();
        let plan = batons[0]
            .submit(json!({"name": name, "tasks": tasks}))
            .await
            .id;
        let batons_ref = &batons;
        let running = eventually(
            Duration::from_secs(10),
            "every command RUNNING",
            || async move {
                let view = batons_ref[0].plan(plan).await?;
                view.tasks
                    .iter()
                    .all(|t| t.status == TaskStatus::Running)
                    .then_some(view)
            },
        )
        .await;
        Scene {
            db,
            store,
            batons,
            plan,
            running,
        }
    }

    /// Every command ran once and was recorded DONE on its first attempt,
    /// its whole output kept.
    async fn every_run_done_once(&self) {
        let done = eventually(Duration::from_secs(30), "the plan ended", || async {
            let view = self.batons[1].plan(self.plan).await?;
            matches!(view.status, PlanStatus::Done | PlanStatus::Failed).then_some(view)
        })
        .await;
        for task in &done.tasks {
            let run = self.store.run_get(task.run_id.unwrap()).await.unwrap();
            assert_eq!(
                (task.status, task.attempt, run.error.as_deref()),
                (TaskStatus::Done, Some(1), None),
                "{} was stopped or failed although its replica lived: {:#?}",
                task.name,
                run.events
            );
            assert!(run.events.iter().all(|e| e.to != RunStatus::Failed));
            assert_eq!(self.store.run_log(run.id).await.unwrap(), "finished\n");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn outside_locks_fail_no_run_and_stop_no_command() {
    let scene = Scene::start("locked-out", 4, 22).await;
    let owner = scene.running.tasks[0].replica_id.clone().unwrap();
    let run = scene.running.tasks[0].run_id.unwrap();
    let long = 3 * STALE_AFTER;
    for lock in [
        "LOCK TABLE task_run IN ACCESS EXCLUSIVE MODE".to_owned(),
        "LOCK TABLE replica IN ACCESS EXCLUSIVE MODE".to_owned(),
        format!("SELECT * FROM replica WHERE replica_id = '{owner}' FOR UPDATE"),
        format!("SELECT * FROM task_run WHERE id = {run} FOR UPDATE"),
        "SELECT * FROM leader_lease FOR UPDATE".to_owned(),
    ] {
        hold(&scene.db, &scene.batons, &lock, long).await;
    }
    // The lease's row free again, a replica leads again within a lease.
    let store = &scene.store;
    eventually(2 * STALE_AFTER, "a leader again", || async {
        let lease = store.lease_get(baton::store::LEADER_LEASE).await.ok()??;
        (lease.expires_at > domain::time::Ts::now()).then_some(())
    })
    .await;
    scene.every_run_done_once().await;
}

/// The same for every table beside the runs' and replicas' that a
/// heartbeat, a finish, a claim or the sweeper writes, each locked whole
/// in turn, with a command ending in each hold: what waits is the work,
/// a finish included, never a running command.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn outside_locks_on_the_side_tables_stop_no_command() {
    const TABLES: [&str; 10] = [
        "leader_lease",
        "sweep_memory",
        "held_replica_heartbeat",
        "held_run_heartbeat",
        "claim_log",
        "finish_log",
        "available_run",
        "run_event",
        "run_log",
        "notification_claim",
    ];
    let long = 3 * STALE_AFTER;
    // Command k ends about a second into hold k + 1, the last one after
    // every hold: none before every command runs, which the scene waits
    // for. Four slots a replica would leave some AVAILABLE meanwhile.
    let secs: Vec<u32> = (0..TABLES.len() as u32).map(|k| 3 * k + 4).collect();
    let slots = Options::fast_liveness().env("BATON_WORKERS", "8");
    let scene = Scene::start_with("side-tables", &secs, slots).await;
    for table in TABLES {
        let lock = format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE");
        hold(&scene.db, &scene.batons, &lock, long).await;
    }
    scene.every_run_done_once().await;
}

/// Readers flooding both replicas' API while the outside lock holds the
/// runs table: each read waits for the lock on a connection of its
/// replica's pool, until none is free. Heartbeats and the leader lease
/// have connections of their own, so no command is stopped or failed,
/// `/readyz` answers within a second, and the leader keeps its lease.
/// Before, the heartbeats queued for a connection behind the readers, the
/// replicas stopped their own commands for want of proof, and the leader's
/// renewals starved until it stepped down (what let a new leader judge in
/// the middle of a lock, and fail a success, in a chaos run).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_waiting_behind_a_lock_starve_no_heartbeat() {
    use baton::store::LEADER_LEASE;
    let scene = Scene::start("flooded", 4, 12).await;
    let leader = scene.store.lease_get(LEADER_LEASE).await.unwrap();
    let until = Instant::now() + 4 * STALE_AFTER;
    let mut readers = tokio::task::JoinSet::new();
    for baton in &scene.batons {
        for _ in 0..24 {
            let (http, url) = (
                reqwest::Client::new(),
                format!("{}/api/v1/plans/{}", baton.base, scene.plan),
            );
            readers.spawn(async move {
                while Instant::now() < until {
                    let _ = http.get(&url).send().await;
                }
            });
        }
    }
    hold(
        &scene.db,
        &scene.batons,
        "LOCK TABLE task_run IN ACCESS EXCLUSIVE MODE",
        3 * STALE_AFTER,
    )
    .await;
    readers.join_all().await;
    scene.every_run_done_once().await;
    let after = scene.store.lease_get(LEADER_LEASE).await.unwrap();
    assert_eq!(
        after.map(|l| (l.holder, l.acquired_at)),
        leader.map(|l| (l.holder, l.acquired_at)),
        "the leader lost its lease while readers waited behind the lock"
    );
}

/// Connections killed every 300 ms (`pg_terminate_backend`, as an
/// administrator or a pooler might) for three times `stale_after`: the
/// API answers 503 while it cannot reach the database, never 500, and
/// every command runs once, DONE on its first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_connections_answer_503_and_cost_no_run() {
    let scene = Scene::start("killed", 3, 6).await;
    let mut killer = sqlx::PgConnection::connect(scene.db.url()).await.unwrap();
    let until = Instant::now() + 3 * STALE_AFTER;
    let mut answers = std::collections::BTreeMap::new();
    while Instant::now() < until {
        kill_other_connections(&mut killer).await;
        for baton in &scene.batons {
            for path in [
                format!("/api/v1/plans/{}", scene.plan),
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
    scene.every_run_done_once().await;
    for baton in &scene.batons {
        eventually(Duration::from_secs(5), "/readyz 200 again", || async {
            let (status, _) = baton.get_json("/readyz").await;
            status.is_success().then_some(())
        })
        .await;
    }
}

/// A command that exited 0 is not failed while its finish is retried: the
/// replica's finishes cannot be stored for four times `stale_after` (a
/// fault standing in for connections killed at every try), and the run is
/// still beaten meanwhile, so the sweeper leaves it, and it is recorded
/// DONE on its first attempt once the finish goes through. Before, beats
/// stopped when the command ended, and the sweeper failed the success as
/// "run heartbeat missed" and ran it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_finish_retried_past_the_heartbeat_timeout_keeps_its_success() {
    let unrecorded = 4 * STALE_AFTER;
    let fault = format!("finishes-unrecorded-for={}", unrecorded.as_secs());
    let options = Options::fast_liveness().env("BATON_FAULT", &fault);
    let scene = Scene::start_with("unrecorded", &[1, 1], options).await;
    tokio::time::sleep(Duration::from_secs(1) + unrecorded / 2).await;
    let view = scene.batons[0].plan(scene.plan).await.unwrap();
    assert!(
        view.tasks.iter().all(|t| t.status == TaskStatus::Running),
        "the commands ended but their finishes are not stored yet: {:?}",
        view.tasks
    );
    scene.every_run_done_once().await;
}

/// The same on SQLite: another program holds the database's write lock
/// (`BEGIN IMMEDIATE`, as a `sqlite3` shell left in a transaction would)
/// for three times `stale_after`. Heartbeats wait for it a moment, as the
/// sweeper does, and count the wait as proof; every command finishes DONE
/// on its first attempt, and `/readyz` answers within a second. Before, a
/// heartbeat waited out SQLite's 30 s busy timeout, and the replica
/// stopped its own commands at three quarters of `stale_after`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_outside_sqlite_write_lock_stops_no_command() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("baton.db").display());
    let baton = Baton::start(&url, &Options::fast_liveness()).await;
    let tasks: Vec<_> = (0..3)
        .map(|i| {
            json!({"name": format!("t{i}"), "target": format!("db/{i}"), "max_attempts": 1,
                   "command": {"argv": ["sh", "-c", "sleep 6; echo finished"]}})
        })
        .collect();
    let plan = baton
        .submit(json!({"name": "locked-out", "tasks": tasks}))
        .await
        .id;
    eventually(Duration::from_secs(10), "every command RUNNING", || async {
        let view = baton.plan(plan).await?;
        view.tasks
            .iter()
            .all(|t| t.status == TaskStatus::Running)
            .then_some(())
    })
    .await;

    let mut outside = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::raw_sql("BEGIN IMMEDIATE")
        .execute(&mut outside)
        .await
        .unwrap();
    let until = Instant::now() + 3 * STALE_AFTER;
    while Instant::now() < until {
        let asked = Instant::now();
        let (status, body) = baton.get_json("/readyz").await;
        let took = asked.elapsed();
        assert!(
            took < Duration::from_millis(1500),
            "/readyz took {took:?} under an outside write lock ({status}: {body})"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    sqlx::raw_sql("COMMIT").execute(&mut outside).await.unwrap();

    let done = eventually(Duration::from_secs(30), "the plan ended", || async {
        let view = baton.plan(plan).await?;
        matches!(view.status, PlanStatus::Done | PlanStatus::Failed).then_some(view)
    })
    .await;
    for task in &done.tasks {
        assert_eq!(
            (task.status, task.attempt, task.error.as_deref()),
            (TaskStatus::Done, Some(1), None),
            "{} was stopped or failed although its replica lived",
            task.name
        );
    }
}

/// A worker slot frees as its execution ends, not once the finish is
/// stored (docs/design.md, "Claim and execute"): a finish held up by a
/// row lock costs the next run nothing. And no more ended runs than
/// slots wait unstored: past that, the replica claims nothing.
///
/// One replica with one slot runs a 2 s command; once it is RUNNING an
/// outside client locks its row, so its finish waits. The next plan's
/// first run still starts on that slot while the lock is held, and its
/// second stays AVAILABLE behind the two unstored finishes. Once the lock
/// goes, all three end DONE on their first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_finish_held_up_frees_its_slot_but_bounds_the_next_claims() {
    let db = TestDb::new(Kind::Postgres).await;
    let store = db.store().await;
    let config = baton::loops::SchedulerConfig {
        workers: 1,
        poll_interval: Duration::from_millis(20),
        ..baton::loops::SchedulerConfig::default()
    };
    let shutdown = tokio_util::sync::CancellationToken::new();
    let replica = baton::loops::Replica::start(
        store.clone(),
        common::store::replica("r-one-slot", &[]),
        config,
        baton::executor::Registry::builtin(),
        shutdown.clone(),
    )
    .await
    .unwrap();
    let submit = |name: &str, tasks: serde_json::Value| {
        let store = store.clone();
        let plan = common::plan(json!({"name": name, "tasks": tasks}));
        async move {
            store
                .plan_insert(&plan, "test".into(), domain::time::Ts::now())
                .await
                .unwrap()
        }
    };
    let run_of = |plan: i64, task: usize| {
        let store = store.clone();
        async move {
            let view = store.plan_get(plan).await.unwrap();
            let run = view.tasks[task].run_id.expect("a run");
            store.run_get(run).await.unwrap()
        }
    };
    let slow = submit("slow", json!([{"name": "x", "target": "a", "sleep": "2s"}])).await;
    let x = eventually(Duration::from_secs(10), "the slow run RUNNING", || async {
        let run = run_of(slow, 0).await;
        (run.status == RunStatus::Running).then_some(run.id)
    })
    .await;
    let mut outside = sqlx::PgConnection::connect(db.url()).await.unwrap();
    let mut tx = outside.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM task_run WHERE id = $1 FOR UPDATE")
        .bind(x)
        .execute(&mut *tx)
        .await
        .unwrap();
    let next = submit(
        "next",
        json!([{"name": "y", "target": "b", "sleep": "0s"}, {"name": "z", "target": "c", "sleep": "0s"}]),
    )
    .await;
    // The slow command ends after 2 s; its finish waits for the lock.
    let (first, started) = eventually(
        Duration::from_secs(10),
        "a run of the next plan started",
        || async {
            for task in 0..2 {
                let run = run_of(next, task).await;
                if run.status != RunStatus::Available && run.status != RunStatus::Pending {
                    return Some((task, run));
                }
            }
            None
        },
    )
    .await;
    assert_eq!(
        run_of(slow, 0).await.status,
        RunStatus::Running,
        "the slow run's finish still waits for the lock"
    );
    assert_eq!(started.replica_id.as_deref(), Some("r-one-slot"));
    // Two ended runs wait unstored with one slot: nothing more is claimed.
    let other = 1 - first;
    let held_until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < held_until {
        let run = run_of(next, other).await;
        assert!(
            matches!(run.status, RunStatus::Available | RunStatus::Pending),
            "with two finishes unstored on one slot, run {} was claimed: {:?}",
            run.id,
            run.status
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tx.commit().await.unwrap();
    for plan in [slow, next] {
        common::store::plan_done(store.as_ref(), plan).await;
        for task in store.plan_get(plan).await.unwrap().tasks {
            assert_eq!(task.status, TaskStatus::Done);
            assert_eq!(task.attempt, Some(1), "task {} ran once", task.name);
        }
    }
    shutdown.cancel();
    replica.join().await.expect("no loop panicked");
}
