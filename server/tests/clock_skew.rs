//! One clock (docs/design.md, "One clock"): real `baton serve` processes on
//! one PostgreSQL database, some on hosts whose wall clocks are off
//! (libfaketime), must agree on every lease, heartbeat and start time,
//! because they all keep to the database's clock.
//!
//! Before the rule, a replica 4 s ahead as leader failed its peers' healthy
//! runs as stale and started a `run_at` task early, and a leader hours ahead
//! wrote a lease no survivor could take after it was killed.

mod common;

use std::time::{Duration, Instant};

use baton::store::{LEADER_LEASE, Store};
use common::process::{Baton, Options};
use common::{Kind, TestDb, eventually, now};
use domain::model::{RunStatus, TaskStatus};
use serde_json::json;
use tokio::sync::Mutex;

const LEASE: Duration = Duration::from_secs(1);
/// Room for process scheduling, database round trips and polling.
const SLACK: Duration = Duration::from_secs(3);

/// Bounds of a few hundred milliseconds: one cluster at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

async fn leader(store: &dyn Store) -> Option<String> {
    store
        .lease_get(LEADER_LEASE)
        .await
        .unwrap()
        .filter(|lease| lease.expires_at > now())
        .map(|lease| lease.holder)
}

async fn wait_for_leader(store: &dyn Store, who: &Baton, within: Duration) {
    eventually(within, &format!("{} to lead", who.replica_id), || async {
        (leader(store).await.as_deref() == Some(who.replica_id.as_str())).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_seconds_off_take_no_lease_early_fail_nobody_and_start_nothing_early() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let db = TestDb::new(Kind::Postgres).await;
    let store = db.store().await;
    let fast = Options::fast_liveness();
    // The replica 4 s ahead leads: its promoter decides `run_at` and its
    // sweeper judges the others' heartbeats.
    let ahead = Baton::start(db.url(), &fast.clone().wall_clock_off_by("+4")).await;
    wait_for_leader(store.as_ref(), &ahead, Duration::from_secs(10)).await;
    let steady = Baton::start(db.url(), &fast).await;
    let behind = Baton::start(db.url(), &fast.clone().wall_clock_off_by("-4")).await;

    let run_at = now().plus(Duration::from_secs(3));
    let pinned = |name: &str, who: &Baton| {
        json!({"name": name, "target": name, "node": who.label, "reassign_after": "never",
               "max_attempts": 1, "sleep": "4s"})
    };
    let plan = steady
        .submit(json!({"name": "skewed", "tasks": [
            pinned("on-ahead", &ahead),
            pinned("on-steady", &steady),
            pinned("on-behind", &behind),
            {"name": "later", "target": "later", "max_attempts": 1, "sleep": "100ms",
             "run_at": run_at.to_string()},
        ]}))
        .await;

    // For five seconds (more than four leases and stale periods) the lease
    // stays where it is and every replica looks alive to every other.
    let watch_until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < watch_until {
        assert_eq!(
            leader(store.as_ref()).await.as_deref(),
            Some(ahead.replica_id.as_str()),
            "the lease changed hands while its holder was healthy"
        );
        for asked in [&ahead, &steady, &behind] {
            let replicas = asked.replicas().await;
            assert_eq!(replicas.len(), 3, "{replicas:#?}");
            assert!(
                replicas.iter().all(|r| r.alive),
                "{} sees a live replica as dead: {replicas:#?}",
                asked.replica_id
            );
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }

    let done = eventually(Duration::from_secs(20), "every task DONE", || async {
        let plan = steady.plan(plan.id).await?;
        let ended = |s| {
            use TaskStatus::*;
            matches!(s, Done | Failed | Canceled | Skipped)
        };
        plan.tasks.iter().all(|t| ended(t.status)).then_some(plan)
    })
    .await;
    for task in &done.tasks {
        assert_eq!(task.status, TaskStatus::Done, "{task:#?}");
        let run = store.run_get(task.run_id.expect("a run")).await.unwrap();
        assert_eq!(run.status, RunStatus::Done, "{run:#?}");
        assert_eq!(run.attempt, 1, "{} ran more than once: {run:#?}", task.name);
    }
    let later = done.tasks.iter().find(|t| t.name == "later").unwrap();
    let later_run = store.run_get(later.run_id.unwrap()).await.unwrap();
    let started = later_run.started_at.expect("started");
    assert!(
        started >= run_at.0,
        "`later` started at {started}, before its run_at {run_at}"
    );

    // Each host's skew is named where an operator looks; decisions are
    // unaffected, so every replica stays ready.
    let skews: Vec<(String, i64)> = steady
        .replicas()
        .await
        .into_iter()
        .map(|r| (r.replica_id, r.clock_skew_ms))
        .collect();
    let skew_of = |who: &Baton| {
        skews
            .iter()
            .find(|(id, _)| *id == who.replica_id)
            .map(|(_, ms)| *ms)
            .unwrap()
    };
    assert!((3_500..4_500).contains(&skew_of(&ahead)), "{skews:?}");
    assert!((-4_500..-3_500).contains(&skew_of(&behind)), "{skews:?}");
    assert!(skew_of(&steady).abs() < 500, "{skews:?}");
    let (status, ready) = ahead.get_json("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    let note = ready["clock"].as_str().unwrap_or_default();
    assert!(note.contains("s ahead of the database"), "{ready}");
    let (status, ready) = steady.get_json("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    assert!(ready.get("clock").is_none(), "{ready}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_hours_ahead_that_dies_hands_the_lease_on_in_one_lease() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let db = TestDb::new(Kind::Postgres).await;
    let store = db.store().await;
    let fast = Options::fast_liveness();
    let mut far = Baton::start(db.url(), &fast.clone().wall_clock_off_by("+2h")).await;
    wait_for_leader(store.as_ref(), &far, Duration::from_secs(10)).await;
    let steady = Baton::start(db.url(), &fast).await;
    let lease = store.lease_get(LEADER_LEASE).await.unwrap().unwrap();
    assert!(
        lease.expires_at <= now().plus(LEASE + Duration::from_millis(500)),
        "a lease written by a host two hours ahead ends within one lease: {lease:?}"
    );

    far.sigkill().await;
    wait_for_leader(store.as_ref(), &steady, LEASE + SLACK).await;
    let plan = steady
        .submit(json!({"name": "after", "tasks": [
            {"name": "t", "target": "t", "sleep": "100ms"},
        ]}))
        .await;
    eventually(SLACK, "the new plan DONE", || async {
        let plan = steady.plan(plan.id).await?;
        (plan.tasks[0].status == TaskStatus::Done).then_some(())
    })
    .await;
    // Shown dead once its last heartbeat (on the database's clock, not
    // two hours ahead) is older than `stale_after`.
    eventually(LEASE + SLACK, "the killed replica shown dead", || async {
        let replicas = steady.replicas().await;
        let dead = replicas
            .iter()
            .find(|r| r.replica_id == far.replica_id)
            .expect("the killed replica's row stays until pruned");
        (!dead.alive && !dead.leader).then_some(())
    })
    .await;
}
