//! Invariant 9 (docs/design.md) with real processes on PostgreSQL: the
//! leader is SIGKILLed just before a tick's transaction commits, or just
//! after, and every due tick still makes exactly one plan — the next leader
//! makes what the dead one did not commit, and nothing it did.

mod common;

use std::time::Duration;

use chrono::{DateTime, Utc};
use common::process::{Baton, Options};
use common::{Kind, TestDb, eventually, invariants};
use serde_json::json;

/// Short leases, so the survivor leads within seconds of the death.
fn options() -> Options {
    Options::default()
        .env("BATON_LEADER_LEASE", "1s")
        .env("BATON_HEARTBEAT_INTERVAL", "500ms")
        .env("BATON_STALE_AFTER", "3s")
}

async fn leader(baton: &Baton) -> Option<String> {
    baton
        .try_replicas()
        .await?
        .into_iter()
        .find(|r| r.leader && r.alive)
        .map(|r| r.replica_id)
}

async fn around_a_tick(fault: &str) {
    let db = TestDb::new(Kind::Postgres).await;
    db.store().await;
    let mut crasher = Baton::start(db.url(), &options().env("BATON_FAULT", fault)).await;
    eventually(Duration::from_secs(15), "the crasher to lead", || async {
        (leader(&crasher).await.as_deref() == Some(crasher.replica_id.as_str())).then_some(())
    })
    .await;
    let survivor = Baton::start(db.url(), &options()).await;
    // Every two seconds; each tick's plan runs at once.
    let (status, created) = survivor
        .post_json(
            "/api/v1/schedules",
            Some(json!({"name": "every-2s", "cron": "*/2 * * * * *", "overlap": "allow",
                "plan": {"name": "tick ${tick}", "tasks": [{"name": "a", "target": "t", "sleep": "0s"}]}})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_i64().expect("schedule created");
    let first: DateTime<Utc> = serde_json::from_value(created["next_ticks"][0].clone()).unwrap();

    use std::os::unix::process::ExitStatusExt;
    let status = tokio::time::timeout(Duration::from_secs(15), crasher.wait())
        .await
        .expect("the leader dies at its first tick");
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");

    // The survivor leads and makes ticks until a few past the death.
    let store = db.store().await;
    let last: DateTime<Utc> = eventually(Duration::from_secs(30), "four ticks", || async {
        let v = store.schedule_get(id).await.unwrap();
        (v.plans.len() >= 4).then(|| v.plans[0].tick_at.unwrap())
    })
    .await;
    let (status, _) = survivor
        .post_json(&format!("/api/v1/schedules/{id}/pause"), None)
        .await;
    assert_eq!(status, 200);
    // Every tick from the first to the last made: one plan each.
    let due: Vec<DateTime<Utc>> = std::iter::successors(Some(first), |t| {
        Some(*t + chrono::TimeDelta::seconds(2)).filter(|n| *n <= last)
    })
    .collect();
    assert!(due.len() >= 4, "{due:?}");
    invariants::schedule_ticks_once(store.as_ref(), id, &due).await;
    // The tick the leader died at was made within a lease and a round of
    // the death (the lease is 1 s, a round 200 ms; slack for a loaded CI).
    let made = store.schedule_get(id).await.unwrap();
    let first_plan = made.plans.iter().find(|p| p.tick_at == Some(first));
    let late = first_plan
        .map(|p| p.created_at - first)
        .unwrap_or_else(|| panic!("no plan for the first tick {first}: {made:?}"));
    eprintln!("{fault}: the first tick's plan was made {late} after the tick");
    assert!(late <= chrono::TimeDelta::seconds(6), "{late}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_killed_before_its_tick_commits_leaves_the_tick_to_the_next() {
    around_a_tick("exit-before-tick-commit").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_killed_after_its_tick_commits_is_not_repeated() {
    around_a_tick("exit-after-tick-commit").await;
}
