//! PostgreSQL restarts in the middle of a plan (docs/design.md,
//! "Invariants", invariant 8): two real `baton serve` processes log,
//! reconnect and finish; no task, run or log line is lost and nothing runs
//! twice.
//!
//! The test restarts a PostgreSQL of its own — a throw-away cluster made
//! with the local `initdb`/`pg_ctl` — so the shared test server is left
//! alone. `scripts/test.sh` makes sure those programs are installed.

mod common;

use std::time::Duration;

use common::cluster::Cluster;
use common::process::{Baton, Options};
use common::{eventually, invariants};
use domain::model::{PlanStatus, TaskStatus};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_postgres_restart_mid_plan_loses_nothing_and_runs_nothing_twice() {
    let cluster = Cluster::start();
    let store = baton::store::connect(&cluster.url()).await.unwrap();
    store.migrate().await.unwrap();
    // Heartbeat timeouts far longer than the outage: runs keep executing
    // while the database is away and must not be swept for it.
    let options = Options::default()
        .env("BATON_HEARTBEAT_INTERVAL", "200ms")
        .env("BATON_STALE_AFTER", "6s")
        .env("BATON_SWEEP_INTERVAL", "200ms")
        .env("BATON_LEADER_LEASE", "1s")
        .env("BATON_POLL_INTERVAL", "100ms");
    let batons = [
        Baton::start(&cluster.url(), &options).await,
        Baton::start(&cluster.url(), &options).await,
    ];
    let tasks: Vec<_> = (0..24)
        .map(|i| {
            json!({"name": format!("t{i}"), "target": format!("db/{i}"),
                "command": {"argv": ["sh", "-c",
                    "echo start $BATON_RUN_ID; sleep 0.3; echo end $BATON_RUN_ID"]}})
        })
        .collect();
    let plan = batons[0]
        .submit(json!({"name": "restart", "parallel_limit": 4, "tasks": tasks}))
        .await;
    let done_before = eventually(Duration::from_secs(30), "some tasks DONE", || async {
        let view = batons[1].plan(plan.id).await?;
        let done = view
            .tasks
            .iter()
            .filter(|t| t.status == TaskStatus::Done)
            .count();
        (done >= 4).then_some(done)
    })
    .await;
    assert!(
        done_before < 20,
        "the restart must come mid-plan ({done_before} DONE)"
    );

    // Runs are executing now; the database goes away for a second.
    cluster.pg_ctl_stop("fast");
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.pg_ctl_start();

    let view = eventually(Duration::from_secs(90), "the plan DONE", || async {
        let view = batons[0].plan(plan.id).await?;
        (view.status == PlanStatus::Done).then_some(view)
    })
    .await;
    let store = baton::store::connect(&cluster.url()).await.unwrap();
    let events = invariants::all_events(store.as_ref()).await;
    // Every run started once and finished DONE once: nothing ran twice.
    invariants::check(std::slice::from_ref(&view), &events);
    for task in &view.tasks {
        assert_eq!(
            task.attempt,
            Some(1),
            "{} needed no second attempt",
            task.name
        );
        let run = task.run_id.unwrap();
        let log = store.run_log(run).await.unwrap();
        assert_eq!(
            log,
            format!("start {run}\nend {run}\n"),
            "{}'s log",
            task.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_cut_off_from_the_database_steps_down_before_its_lease_expires() {
    use baton::loops::LeaderLease;
    use std::time::Instant;
    use tokio_util::sync::CancellationToken;

    let cluster = Cluster::start();
    let store = baton::store::connect(&cluster.url()).await.unwrap();
    store.migrate().await.unwrap();
    let ttl = Duration::from_secs(3);
    let (lease, leadership) = LeaderLease::new(store.clone(), "r-alone".into(), ttl);
    let shutdown = CancellationToken::new();
    let looping = tokio::spawn(lease.run(shutdown.clone()));
    eventually(Duration::from_secs(10), "leadership", || async {
        leadership.is_leader().then_some(())
    })
    .await;
    // Renewals now fail. The lease may have been renewed just before the
    // cut, so it stays valid for up to `ttl` from here: the replica must
    // stop leading before then, or two leaders could overlap.
    let cut = Instant::now();
    cluster.pg_ctl_stop("immediate");
    eventually(ttl, "stepping down", || async {
        (!leadership.is_leader()).then_some(())
    })
    .await;
    let stepped_down = cut.elapsed();
    assert!(
        stepped_down < ttl,
        "stepped down {stepped_down:?} after the cut"
    );
    cluster.pg_ctl_start();
    eventually(Duration::from_secs(15), "leading again", || async {
        leadership.is_leader().then_some(())
    })
    .await;
    shutdown.cancel();
    looping.await.unwrap();
    assert_eq!(
        store.lease_get(baton::store::LEADER_LEASE).await.unwrap(),
        None,
        "released"
    );
}
