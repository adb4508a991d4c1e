//! Notifications with real `baton serve` processes on one PostgreSQL
//! database and a local receiver that records every POST (docs/design.md,
//! "Notifications"; invariants 5 and 8): exactly one PIPELINE_FAILED and
//! one PIPELINE_COMPLETED per phase whatever the number of replicas,
//! retries that keep their idempotency key and signature, and a delivery
//! that survives the death of the replica that claimed it.

mod common;

use std::time::Duration;

use baton::webhook_signature::verify;
use common::process::{Baton, Options};
use common::receiver::Receiver;
use common::{Kind, TestDb, eventually};
use domain::model::{DeliveryView, PlanStatus};
use serde_json::json;

const SECRET: &str = "global-secret";

fn options(hook: &str) -> Options {
    Options::default()
        .env("BATON_WEBHOOK_URL", hook)
        .env("BATON_WEBHOOK_SECRET", SECRET)
        .env("BATON_HEARTBEAT_INTERVAL", "200ms")
        .env("BATON_STALE_AFTER", "2s")
        .env("BATON_SWEEP_INTERVAL", "200ms")
        .env("BATON_LEADER_LEASE", "1s")
        .env("BATON_POLL_INTERVAL", "100ms")
}

async fn plan_status(b: &Baton, id: i64, want: PlanStatus, within: Duration) {
    eventually(within, &format!("plan {id} {want:?}"), || async move {
        b.plan(id).await.filter(|p| p.status == want).map(|_| ())
    })
    .await;
}

/// Waits long enough for a duplicate to show up if one were coming:
/// every replica polls the outbox every 100 ms.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(1500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_notify_once_per_phase_and_retry_deliveries() {
    let db = TestDb::new(Kind::Postgres).await;
    db.store().await;
    let (receiver, hooks) = Receiver::start().await;
    let flag = tempfile::tempdir().unwrap();
    let fixed = flag.path().join("fixed");
    let mut batons = Vec::new();
    for _ in 0..3 {
        batons.push(Baton::start(db.url(), &options(&format!("{hooks}/hook"))).await);
    }
    // 20 tasks; 3 fail until the flag file exists.
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let script = if i % 7 == 3 {
                format!("sleep 0.1; test -e {}", fixed.display())
            } else {
                "sleep 0.1".to_owned()
            };
            json!({"name": format!("t{i}"), "target": format!("db/{i}"),
                   "command": {"argv": ["sh", "-c", script]}})
        })
        .collect();
    let plan = batons[0]
        .submit(json!({"name": "notify-once", "tasks": tasks}))
        .await;
    assert_eq!(plan.tasks.len(), 20);
    plan_status(
        &batons[1],
        plan.id,
        PlanStatus::Failed,
        Duration::from_secs(60),
    )
    .await;
    eventually(Duration::from_secs(15), "PIPELINE_FAILED", || async {
        (!receiver.events("hook", "PIPELINE_FAILED").is_empty()).then_some(())
    })
    .await;
    settle().await;
    let failed = receiver.events("hook", "PIPELINE_FAILED");
    assert_eq!(failed.len(), 1, "exactly one PIPELINE_FAILED: {failed:?}");
    assert!(verify(
        SECRET,
        failed[0].body.as_bytes(),
        &failed[0].signature
    ));
    let body: serde_json::Value = serde_json::from_str(&failed[0].body).unwrap();
    assert_eq!(body["plan"]["id"], plan.id);
    // Sent at the first failure: the other two failed later, silently.
    assert_eq!(body["counts"]["FAILED"], 1, "{body}");
    assert_eq!(body["failed_tasks"].as_array().unwrap().len(), 1, "{body}");
    let view = batons[1].plan(plan.id).await.unwrap();
    let failed_tasks = view
        .tasks
        .iter()
        .filter(|t| t.status == domain::model::TaskStatus::Failed)
        .count();
    assert_eq!(failed_tasks, 3);

    // Fix the command and retry the plan through the API.
    std::fs::write(&fixed, b"").unwrap();
    let retried = reqwest::Client::new()
        .post(format!("{}/api/v1/plans/{}/retry", batons[2].base, plan.id))
        .send()
        .await
        .unwrap();
    assert!(retried.status().is_success(), "{}", retried.status());
    plan_status(
        &batons[0],
        plan.id,
        PlanStatus::Done,
        Duration::from_secs(60),
    )
    .await;
    eventually(Duration::from_secs(15), "PIPELINE_COMPLETED", || async {
        (!receiver.events("hook", "PIPELINE_COMPLETED").is_empty()).then_some(())
    })
    .await;
    settle().await;
    let completed = receiver.events("hook", "PIPELINE_COMPLETED");
    assert_eq!(
        completed.len(),
        1,
        "exactly one PIPELINE_COMPLETED: {completed:?}"
    );
    assert_eq!(receiver.seen("hook").len(), 2, "nothing else was sent");
    assert!(verify(
        SECRET,
        completed[0].body.as_bytes(),
        &completed[0].signature
    ));
    assert_ne!(completed[0].delivery, failed[0].delivery);
    let view = batons[1].plan(plan.id).await.unwrap();
    assert_eq!(view.notification.unwrap().event, "PIPELINE_COMPLETED");

    // A receiver that fails twice: the same key each time, signed with the
    // plan's own secret, and every attempt kept.
    let flaky = batons[0]
        .submit(json!({"name": "flaky", "webhooks": [{"url": format!("{hooks}/flaky"), "secret": "own"}],
            "tasks": [{"name": "a", "target": "x", "sleep": "0s"}]}))
        .await;
    eventually(Duration::from_secs(20), "3 attempts at /flaky", || async {
        (receiver.seen("flaky").len() >= 3).then_some(())
    })
    .await;
    let attempts = receiver.seen("flaky");
    assert_eq!(attempts.len(), 3, "{attempts:?}");
    assert!(attempts.iter().all(|a| a.delivery == attempts[0].delivery));
    assert!(
        attempts
            .iter()
            .all(|a| verify("own", a.body.as_bytes(), &a.signature))
    );
    let deliveries: Vec<DeliveryView> = eventually(
        Duration::from_secs(10),
        "the delivery recorded DELIVERED",
        || async {
            let list: Vec<DeliveryView> = reqwest::get(format!(
                "{}/api/v1/deliveries?plan_id={}",
                batons[2].base, flaky.id
            ))
            .await
            .ok()?
            .json()
            .await
            .ok()?;
            list.iter()
                .any(|d| d.url.ends_with("/flaky") && d.state == "DELIVERED")
                .then_some(list)
        },
    )
    .await;
    let to_flaky = deliveries
        .iter()
        .find(|d| d.url.ends_with("/flaky"))
        .unwrap();
    let codes: Vec<_> = to_flaky.attempts.iter().map(|a| a.status_code).collect();
    assert_eq!(codes, [Some(500), Some(500), Some(200)]);
    assert_eq!(to_flaky.delivery_key, attempts[0].delivery);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delivery_survives_the_death_of_the_replica_that_claimed_it() {
    let db = TestDb::new(Kind::Postgres).await;
    db.store().await;
    let (receiver, hooks) = Receiver::start().await;
    let hook = format!("{hooks}/hook");
    let mut crasher = Baton::start(
        db.url(),
        &options(&hook).env("BATON_FAULT", "exit-after-notification-claim"),
    )
    .await;
    let survivor = Baton::start(db.url(), &options(&hook)).await;
    // Pinned to the crasher, so its finish claims the notification.
    let plan = survivor
        .submit(
            json!({"name": "crash", "tasks": [{"name": "a", "target": "x",
            "node": crasher.label, "command": {"argv": ["true"]}}]}),
        )
        .await;
    let status = tokio::time::timeout(Duration::from_secs(30), crasher.wait())
        .await
        .expect("the crasher dies after claiming");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
    let view = survivor.plan(plan.id).await.unwrap();
    assert_eq!(view.status, PlanStatus::Done);
    assert_eq!(view.notification.unwrap().event, "PIPELINE_COMPLETED");
    // The survivor sends it (at once, or once the dead sender's 30 s lock
    // lapses if it had taken the row before dying).
    let got = eventually(Duration::from_secs(45), "the delivery", || async {
        let got = receiver.events("hook", "PIPELINE_COMPLETED");
        (!got.is_empty()).then_some(got)
    })
    .await;
    settle().await;
    assert_eq!(receiver.events("hook", "PIPELINE_COMPLETED").len(), 1);
    assert!(verify(SECRET, got[0].body.as_bytes(), &got[0].signature));
}
