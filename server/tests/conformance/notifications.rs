//! Notification claims and the outbox (docs/design.md, "Notifications"), on
//! SQLite and PostgreSQL: one claim per plan and phase, written with the
//! status change that caused it; Retry opens a new phase; deliveries are
//! taken by one sender at a time and keep every attempt.

use std::sync::Arc;
use std::time::Duration;

use baton::store::{DeliveryOutcome, Notified, NotifyTargets, Signals, Store};
use baton::store::{PIPELINE_COMPLETED, PIPELINE_FAILED};
use domain::model::TaskStatus;
use domain::time::Ts;
use serde_json::json;
use tokio::sync::Notify;

use crate::common::store::{
    claim, done, failed, noop_tasks, promote, promote_and_claim, task_named,
};
use crate::common::{Kind, TestDb, plan};
use crate::per_backend;

per_backend!(cases:
    the_first_failure_of_a_phase_notifies_once,
    retry_opens_a_new_phase_that_notifies_completion,
    automatic_retries_are_not_failures_yet,
    sweeps_and_skips_notify_too,
    deliveries_go_to_one_sender_and_keep_every_attempt,
    concurrent_finishers_claim_completion_exactly_once,
    without_a_destination_the_claim_is_kept_and_nothing_is_queued,
    only_queued_deliveries_wake_the_deliverer,
    one_host_has_at_most_four_deliveries_in_flight,
    a_receiver_that_never_answers_holds_up_no_other,
    a_redirect_is_a_failed_attempt_and_the_password_stays_hidden,
);

fn targets() -> NotifyTargets {
    NotifyTargets {
        webhook_url: Some("http://ops.example/hook".into()),
        public_url: "http://baton.example".into(),
    }
}

async fn store_with_targets(db: &TestDb) -> Arc<dyn Store> {
    let s = db.store().await;
    s.notify_targets_set(targets());
    s
}

/// One task, and a webhook of the plan's own: with no `BATON_WEBHOOK_URL`
/// its only destination.
fn own_webhook_only() -> serde_json::Value {
    json!({"name": "own", "webhooks": [{"url": "http://team.example/hook"}],
        "tasks": [{"name": "a", "target": "own", "sleep": "0s"}]})
}

fn three_tasks() -> serde_json::Value {
    json!({"name": "p", "webhooks": [{"url": "http://team.example/hook", "secret": "team"}],
    "tasks": [
        {"name": "a", "target": "a", "sleep": "0s"},
        {"name": "b", "target": "b", "sleep": "0s"},
        {"name": "c", "target": "c", "sleep": "0s"},
    ]})
}

/// Plans that each end FAILED, each notifying only `url` (its own
/// webhook): one pending delivery to `url` per plan, oldest first.
async fn failed_plans_notifying(s: &dyn Store, url: &str, count: usize) {
    for i in 0..count {
        s.plan_insert(
            &plan(
                json!({"name": format!("notify-{i}"), "webhooks": [{"url": url}],
                "tasks": [{"name": "a", "target": format!("t-{url}-{i}"), "sleep": "0s"}]}),
            ),
            "t".into(),
            Ts::now(),
        )
        .await
        .unwrap();
        let run = promote_and_claim(s).await[0];
        s.run_finish_many("r-test", &[failed(run)], Ts::now())
            .await
            .unwrap();
    }
}

/// Attempts recorded so far at deliveries to `url`.
async fn attempts_to(s: &dyn Store, url: &str) -> usize {
    s.delivery_list(None, 100)
        .await
        .unwrap()
        .iter()
        .filter(|d| d.url == url)
        .map(|d| d.attempts.len())
        .sum()
}

/// A deliverer of `s`'s due rows, running until the token is cancelled.
fn deliver(
    s: &Arc<dyn Store>,
    max_attempts: u32,
) -> (
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let deliverer = baton::loops::Deliverer::new(
        s.clone(),
        "r-deliver".into(),
        baton::loops::DeliveryConfig {
            secret: None,
            max_attempts,
        },
        Duration::from_millis(100),
    );
    (shutdown.clone(), tokio::spawn(deliverer.run(shutdown)))
}

mod cases {
    use super::*;

    pub async fn the_first_failure_of_a_phase_notifies_once(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = store_with_targets(&db).await;
        let id = s
            .plan_insert(&plan(three_tasks()), "t".into(), Ts::now())
            .await
            .unwrap();
        let runs = promote_and_claim(s.as_ref()).await;
        let first = s
            .run_finish_many("r-test", &[failed(runs[0])], Ts::now())
            .await
            .unwrap();
        assert_eq!(
            first.notified,
            vec![Notified {
                plan_id: id,
                event: PIPELINE_FAILED,
                deliveries: 2,
            }]
        );
        let second = s
            .run_finish_many("r-test", &[failed(runs[1]), done(runs[2])], Ts::now())
            .await
            .unwrap();
        assert!(
            second.notified.is_empty(),
            "later failures in the phase are silent"
        );

        let view = s.plan_get(id).await.unwrap();
        assert_eq!(view.notification.as_ref().unwrap().event, PIPELINE_FAILED);
        let deliveries = s.delivery_list(Some(id), 50).await.unwrap();
        let urls: Vec<_> = deliveries.iter().rev().map(|d| d.url.as_str()).collect();
        assert_eq!(
            urls,
            ["http://ops.example/hook", "http://team.example/hook"]
        );
        assert!(
            deliveries
                .iter()
                .all(|d| d.state == "PENDING" && d.attempts.is_empty())
        );

        // The payload names the plan, its counts and the failed task.
        let due = s
            .delivery_take_due("r-test", 10, Duration::from_secs(30), Ts::now())
            .await
            .unwrap();
        assert_eq!(due.len(), 2);
        let body: serde_json::Value = serde_json::from_str(&due[0].payload).unwrap();
        assert_eq!(body["event"], PIPELINE_FAILED);
        assert_eq!(body["plan"]["id"], id);
        assert_eq!(body["plan"]["name"], "p");
        assert_eq!(
            body["plan"]["url"],
            format!("http://baton.example/plans/{id}")
        );
        assert_eq!(body["counts"]["FAILED"], 1, "{body}");
        assert_eq!(body["counts"]["RUNNING"], 2, "{body}");
        assert_eq!(body["failed_tasks"][0]["name"], "a");
        assert_eq!(body["failed_tasks"][0]["target"], "a");
        assert_eq!(body["failed_tasks"][0]["error"], "exited with code 3");
        assert!(body["occurred_at"].is_string() && body["plan_created_at"].is_string());
        let secrets: Vec<_> = due
            .iter()
            .map(|d| d.secret.as_ref().map(|s| s.expose()))
            .collect();
        assert_eq!(secrets, [None, Some("team")]);
        // A plan-level Retry opens a new phase too; the history stays.
        s.plan_retry(id, "dave".into(), Ts::now()).await.unwrap();
        assert_eq!(s.plan_get(id).await.unwrap().notification, None);
        assert_eq!(s.delivery_list(Some(id), 50).await.unwrap().len(), 2);
        db.assert_open_task_counts().await;
    }

    pub async fn retry_opens_a_new_phase_that_notifies_completion(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = store_with_targets(&db).await;
        let id = s
            .plan_insert(&plan(three_tasks()), "t".into(), Ts::now())
            .await
            .unwrap();
        let runs = promote_and_claim(s.as_ref()).await;
        s.run_finish_many(
            "r-test",
            &[failed(runs[0]), done(runs[1]), done(runs[2])],
            Ts::now(),
        )
        .await
        .unwrap();
        let view = s.plan_get(id).await.unwrap();
        assert_eq!(view.notification.as_ref().unwrap().event, PIPELINE_FAILED);
        s.task_retry(task_named(&view, "a").id, "dave".into(), Ts::now())
            .await
            .unwrap();
        assert_eq!(s.plan_get(id).await.unwrap().notification, None);

        let retried = promote_and_claim(s.as_ref()).await;
        assert_eq!(retried.len(), 1);
        let report = s
            .run_finish_many("r-test", &[done(retried[0])], Ts::now())
            .await
            .unwrap();
        assert_eq!(
            report.notified,
            vec![Notified {
                plan_id: id,
                event: PIPELINE_COMPLETED,
                deliveries: 2,
            }]
        );
        let events: Vec<_> = s
            .delivery_list(Some(id), 50)
            .await
            .unwrap()
            .into_iter()
            .map(|d| d.event)
            .collect();
        assert_eq!(
            events,
            [
                PIPELINE_COMPLETED,
                PIPELINE_COMPLETED,
                PIPELINE_FAILED,
                PIPELINE_FAILED
            ]
        );
        db.assert_open_task_counts().await;
    }

    pub async fn automatic_retries_are_not_failures_yet(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = store_with_targets(&db).await;
        let id = s
            .plan_insert(
                &plan(json!({"name": "p", "tasks": [
                    {"name": "a", "target": "a", "sleep": "0s", "max_attempts": 2}]})),
                "t".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        let run = promote_and_claim(s.as_ref()).await[0];
        let report = s
            .run_finish_many("r-test", &[failed(run)], Ts::now())
            .await
            .unwrap();
        assert!(report.notified.is_empty());
        assert_eq!(report.retried.len(), 1);
        // The retry waits out its backoff; promote as if it had passed.
        s.run_promote_round(
            &Default::default(),
            None,
            Ts::now().plus(Duration::from_secs(5)),
        )
        .await
        .unwrap();
        let second = s
            .run_claim_many(&claim("r-test", &[], 1), Ts::now())
            .await
            .unwrap()[0]
            .id;
        let report = s
            .run_finish_many("r-test", &[failed(second)], Ts::now())
            .await
            .unwrap();
        assert_eq!(report.notified.len(), 1);
        assert_eq!(
            s.plan_get(id).await.unwrap().notification.unwrap().event,
            PIPELINE_FAILED
        );
        db.assert_open_task_counts().await;
    }

    pub async fn sweeps_and_skips_notify_too(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = store_with_targets(&db).await;
        let id = s
            .plan_insert(
                &plan(json!({"name": "p", "tasks": [
                    {"name": "a", "target": "a", "sleep": "0s"},
                    {"name": "b", "target": "b", "sleep": "0s"}]})),
                "t".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        promote(s.as_ref()).await;
        // r-gone has no heartbeat row: the sweeper fails its runs.
        s.run_claim_many(&claim("r-gone", &[], 2), Ts::now())
            .await
            .unwrap();
        let swept = s
            .run_sweep(Duration::from_secs(10), None, Ts::now())
            .await
            .unwrap();
        assert_eq!(swept.failed.len(), 2);
        assert_eq!(
            swept.notified,
            vec![Notified {
                plan_id: id,
                event: PIPELINE_FAILED,
                deliveries: 1,
            }]
        );
        // Skipping a failed task decides it, as a Retry does: a new phase.
        // The first skip leaves b FAILED (nothing to send); the second
        // completes the plan, and its completion is notified.
        let view = s.plan_get(id).await.unwrap();
        s.task_skip(task_named(&view, "a").id, "erin".into(), Ts::now())
            .await
            .unwrap();
        assert_eq!(s.delivery_list(Some(id), 50).await.unwrap().len(), 1);
        s.task_skip(task_named(&view, "b").id, "erin".into(), Ts::now())
            .await
            .unwrap();
        let events: Vec<String> = s
            .delivery_list(Some(id), 50)
            .await
            .unwrap()
            .iter()
            .rev()
            .map(|d| d.event.clone())
            .collect();
        assert_eq!(events, [PIPELINE_FAILED, PIPELINE_COMPLETED]);
        // A plan completed by skipping a task never started notifies too.
        let other = s
            .plan_insert(
                &plan(json!({"name": "q", "start": false, "tasks": [
                    {"name": "a", "target": "a", "sleep": "0s"}]})),
                "t".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        let task = s.plan_get(other).await.unwrap().tasks[0].id;
        s.task_skip(task, "erin".into(), Ts::now()).await.unwrap();
        let view = s.plan_get(other).await.unwrap();
        assert_eq!(view.tasks[0].status, TaskStatus::Skipped);
        assert_eq!(view.notification.unwrap().event, PIPELINE_COMPLETED);
        db.assert_open_task_counts().await;
    }

    pub async fn deliveries_go_to_one_sender_and_keep_every_attempt(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = store_with_targets(&db).await;
        let id = s
            .plan_insert(
                &plan(json!({"name": "p", "tasks": [{"name": "a", "target": "a", "sleep": "0s"}]})),
                "t".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        let run = promote_and_claim(s.as_ref()).await[0];
        s.run_finish_many("r-test", &[done(run)], Ts::now())
            .await
            .unwrap();
        let t0 = Ts::now();
        let lock = Duration::from_secs(30);
        let taken = s.delivery_take_due("r-1", 10, lock, t0).await.unwrap();
        assert_eq!(taken.len(), 1);
        assert!(
            s.delivery_take_due("r-2", 10, lock, t0)
                .await
                .unwrap()
                .is_empty()
        );
        let key = taken[0].delivery_key.clone();
        // Attempt 1: the receiver answers 500; retry in 1 s.
        let retry_at = t0.plus(Duration::from_secs(1));
        let outcome = DeliveryOutcome {
            status_code: Some(500),
            error: Some("receiver answered 500 Internal Server Error".into()),
            retry_at: Some(retry_at),
        };
        s.delivery_record("r-1", &taken[0], &outcome, t0)
            .await
            .unwrap();
        assert!(
            s.delivery_take_due("r-2", 10, lock, t0)
                .await
                .unwrap()
                .is_empty()
        );
        // Attempt 2, by another replica once due: delivered.
        let again = s
            .delivery_take_due("r-2", 10, lock, retry_at)
            .await
            .unwrap();
        assert_eq!(
            (again[0].delivery_key.as_str(), again[0].attempts),
            (key.as_str(), 1)
        );
        let ok = DeliveryOutcome {
            status_code: Some(200),
            error: None,
            retry_at: None,
        };
        s.delivery_record("r-2", &again[0], &ok, retry_at)
            .await
            .unwrap();
        let list = s.delivery_list(Some(id), 50).await.unwrap();
        assert_eq!(list.len(), 1);
        let d = &list[0];
        assert_eq!(
            (d.state.as_str(), d.delivery_key.as_str()),
            ("DELIVERED", key.as_str())
        );
        assert_eq!(d.last_status_code, Some(200));
        assert_eq!(d.delivered_at, Some(retry_at.0));
        let attempts: Vec<_> = d
            .attempts
            .iter()
            .map(|a| (a.attempt, a.replica_id.as_str(), a.status_code))
            .collect();
        assert_eq!(attempts, [(1, "r-1", Some(500)), (2, "r-2", Some(200))]);
        assert!(d.attempts[0].error.as_deref().unwrap().contains("500"));
        assert!(
            s.delivery_take_due("r-3", 10, lock, retry_at.plus(lock))
                .await
                .unwrap()
                .is_empty(),
            "a delivered row is never sent again"
        );
        // A sender that died: its lock lapses and another takes the row.
        let id2 = s
            .plan_insert(
                &plan(json!({"name": "q", "tasks": [{"name": "a", "target": "z", "sleep": "0s"}]})),
                "t".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        let run = promote_and_claim(s.as_ref()).await[0];
        s.run_finish_many("r-test", &[done(run)], Ts::now())
            .await
            .unwrap();
        let t1 = Ts::now();
        let lost = s.delivery_take_due("r-dead", 10, lock, t1).await.unwrap();
        assert_eq!(lost[0].plan_id, id2);
        let taken = s
            .delivery_take_due(
                "r-4",
                10,
                lock,
                t1.plus(lock).plus(Duration::from_millis(1)),
            )
            .await
            .unwrap();
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].delivery_key, lost[0].delivery_key);
        db.assert_open_task_counts().await;
    }

    /// A slow receiver ties up a few senders, not all: at most four of
    /// its deliveries are taken and unrecorded at once, whichever of its
    /// URLs they go to (a chat service gives a URL per channel), the rest
    /// wait without hiding other receivers' rows behind them.
    pub async fn one_host_has_at_most_four_deliveries_in_flight(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let (slow, fast) = ("slow.example", "fast.example");
        // The slow host's rows are older, so they come first in due order.
        failed_plans_notifying(s.as_ref(), "http://slow.example/channel-a", 4).await;
        failed_plans_notifying(s.as_ref(), "http://slow.example/channel-b", 3).await;
        failed_plans_notifying(s.as_ref(), "http://fast.example/hook", 1).await;
        let t0 = Ts::now();
        let lock = Duration::from_secs(30);
        let urls = |taken: &[baton::store::DueDelivery]| {
            let mut hosts: Vec<_> = taken
                .iter()
                .map(|d| d.url.split('/').nth(2).unwrap().to_owned())
                .collect();
            hosts.sort();
            hosts
        };
        let first = s.delivery_take_due("r-1", 10, lock, t0).await.unwrap();
        assert_eq!(urls(&first), [fast, slow, slow, slow, slow]);
        // Across replicas too: the slow host is full, the fast one taken.
        assert!(
            s.delivery_take_due("r-2", 10, lock, t0)
                .await
                .unwrap()
                .is_empty()
        );
        // One slow send ends: room for one more, the oldest waiting.
        let ended = first.iter().find(|d| d.url.contains(slow)).unwrap();
        let ok = DeliveryOutcome {
            status_code: Some(200),
            error: None,
            retry_at: None,
        };
        s.delivery_record("r-1", ended, &ok, t0).await.unwrap();
        let next = s.delivery_take_due("r-2", 10, lock, t0).await.unwrap();
        assert_eq!(urls(&next), [slow]);
        let newest_taken = first
            .iter()
            .filter(|d| d.url.contains(slow))
            .map(|d| d.id)
            .max();
        assert!(Some(next[0].id) > newest_taken, "oldest waiting row first");
        // Dead senders' lapsed locks do not count as in flight: six slow
        // rows wait (one was delivered), four go; the fast one goes again.
        let later = t0.plus(lock).plus(Duration::from_millis(1));
        let retaken = s.delivery_take_due("r-3", 10, lock, later).await.unwrap();
        assert_eq!(urls(&retaken), [fast, slow, slow, slow, slow]);
        db.assert_open_task_counts().await;
    }

    /// The deliverer keeps sending while a receiver takes its whole
    /// timeout: with more of its deliveries due than a replica has
    /// senders, and more of another's than fit beside them in one take,
    /// every other notification still arrives before any attempt at the
    /// silent receiver has ended.
    pub async fn a_receiver_that_never_answers_holds_up_no_other(kind: Kind) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        // Accepts connections and never answers; counts them.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let silent_url = format!("http://{}/hook", silent.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let (hang_up, hung_up) = tokio::sync::watch::channel(false);
        let holding = {
            let accepted = accepted.clone();
            tokio::spawn(async move {
                let mut held = Vec::new();
                let mut hung_up = hung_up;
                loop {
                    tokio::select! {
                        Ok((socket, _)) = silent.accept() => {
                            accepted.fetch_add(1, Ordering::SeqCst);
                            held.push(socket);
                        }
                        _ = hung_up.changed() => return,
                    }
                }
            })
        };
        let (receiver, base) = crate::common::receiver::Receiver::start().await;
        let good_url = format!("{base}/hook");
        // More silent deliveries than senders, and older than the others;
        // more good ones than fit beside the silent ones' four at once, so
        // some are taken only as earlier sends end.
        failed_plans_notifying(s.as_ref(), &silent_url, 20).await;
        failed_plans_notifying(s.as_ref(), &good_url, 20).await;

        let (shutdown, running) = deliver(&s, 3);
        let waited = tokio::time::Instant::now();
        while receiver.seen("hook").len() < 20 {
            assert!(
                waited.elapsed() < Duration::from_secs(60),
                "the good receiver saw {} of 20",
                receiver.seen("hook").len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let silent_attempts = attempts_to(s.as_ref(), &silent_url).await;
        assert_eq!(
            silent_attempts, 0,
            "an attempt at the silent receiver ended before the others were all sent"
        );
        assert!(
            accepted.load(Ordering::SeqCst) <= 4,
            "{} sends to one URL at once",
            accepted.load(Ordering::SeqCst)
        );
        // Stop, then hang up on the held sends so they fail now: the
        // stopping deliverer takes nothing more, waits for its sends and
        // keeps their outcomes.
        shutdown.cancel();
        tokio::time::sleep(Duration::from_millis(100)).await;
        hang_up.send(true).unwrap();
        holding.await.unwrap();
        running.await.unwrap();
        let silent_attempts = attempts_to(s.as_ref(), &silent_url).await;
        assert_eq!(
            silent_attempts, 4,
            "the four sends under way at the stop, each kept"
        );
        db.assert_open_task_counts().await;
    }

    /// A signed notification goes to the URL configured, not wherever that
    /// redirects: a 3xx is a failed attempt and the other place hears
    /// nothing. The URL's password shows nowhere an operator reads.
    pub async fn a_redirect_is_a_failed_attempt_and_the_password_stays_hidden(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let (receiver, base) = crate::common::receiver::Receiver::start().await;
        let elsewhere = format!("{base}/hook");
        let moved = axum::Router::new().route(
            "/moved",
            axum::routing::post(move || {
                let to = elsewhere.clone();
                async move {
                    (
                        axum::http::StatusCode::TEMPORARY_REDIRECT,
                        [(axum::http::header::LOCATION, to)],
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let host = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, moved).await.unwrap() });
        let url = format!("http://hooks:pa55word@{host}/moved");
        failed_plans_notifying(s.as_ref(), &url, 1).await;

        let (shutdown, running) = deliver(&s, 1);
        let waited = tokio::time::Instant::now();
        let delivery = loop {
            let list = s.delivery_list(None, 10).await.unwrap();
            if list[0].state != "PENDING" {
                break list[0].clone();
            }
            assert!(waited.elapsed() < Duration::from_secs(60), "{list:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        shutdown.cancel();
        running.await.unwrap();
        assert_eq!(delivery.state, "FAILED");
        assert_eq!(delivery.last_status_code, Some(307));
        assert_eq!(
            delivery.last_error.as_deref(),
            Some("receiver answered 307 Temporary Redirect")
        );
        assert!(
            receiver.seen("hook").is_empty(),
            "the redirect was followed"
        );
        assert_eq!(delivery.url, format!("http://hooks:***@{host}/moved"));
        let shown = serde_json::to_string(&delivery).unwrap();
        assert!(!shown.contains("pa55word"), "{shown}");
        db.assert_open_task_counts().await;
    }

    pub async fn concurrent_finishers_claim_completion_exactly_once(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = store_with_targets(&db).await;
        let tasks = noop_tasks(8);
        for round in 0..5 {
            let id = s
                .plan_insert(
                    &plan(json!({"name": format!("p{round}"), "tasks": tasks})),
                    "t".into(),
                    Ts::now(),
                )
                .await
                .unwrap();
            promote(s.as_ref()).await;
            // Eight replicas each claim one run and finish it at once.
            let mut finishers = tokio::task::JoinSet::new();
            for i in 0..8 {
                let store = db.store().await;
                let me = format!("r-{i}");
                let run = store
                    .run_claim_many(&claim(&me, &[], 1), Ts::now())
                    .await
                    .unwrap()[0]
                    .id;
                store.notify_targets_set(targets());
                finishers.spawn(async move {
                    store
                        .run_finish_many(&me, &[done(run)], Ts::now())
                        .await
                        .unwrap()
                        .notified
                });
            }
            let notified: Vec<_> = finishers.join_all().await.into_iter().flatten().collect();
            assert_eq!(
                notified,
                vec![Notified {
                    plan_id: id,
                    event: PIPELINE_COMPLETED,
                    deliveries: 1,
                }],
                "round {round}"
            );
            assert_eq!(s.delivery_list(Some(id), 50).await.unwrap().len(), 1);
        }
        db.assert_open_task_counts().await;
    }

    /// With no `BATON_WEBHOOK_URL`, a plan without webhooks still claims its
    /// notification (Retry and the dashboard read the claim) but queues no
    /// delivery, while a plan with its own webhook gets one, with the full
    /// payload.
    pub async fn without_a_destination_the_claim_is_kept_and_nothing_is_queued(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let quiet = s
            .plan_insert(
                &plan(json!({"name": "quiet", "tasks": noop_tasks(2)})),
                "t".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        let loud = s
            .plan_insert(&plan(own_webhook_only()), "t".into(), Ts::now())
            .await
            .unwrap();
        let runs = promote_and_claim(s.as_ref()).await;
        assert_eq!(runs.len(), 3);
        let report = s
            .run_finish_many(
                "r-test",
                &runs.iter().map(|r| done(*r)).collect::<Vec<_>>(),
                Ts::now(),
            )
            .await
            .unwrap();
        let completed = |plan_id, deliveries| Notified {
            plan_id,
            event: PIPELINE_COMPLETED,
            deliveries,
        };
        assert_eq!(
            report.notified,
            vec![completed(quiet, 0), completed(loud, 1)]
        );
        let claim = s.plan_get(quiet).await.unwrap().notification.unwrap();
        assert_eq!(claim.event, PIPELINE_COMPLETED);
        assert!(s.delivery_list(Some(quiet), 50).await.unwrap().is_empty());

        let due = s
            .delivery_take_due("r-test", 10, Duration::from_secs(30), Ts::now())
            .await
            .unwrap();
        assert_eq!(due.len(), 1, "only the plan with a webhook queues one");
        assert_eq!(due[0].url, "http://team.example/hook");
        let body: serde_json::Value = serde_json::from_str(&due[0].payload).unwrap();
        assert_eq!(body["plan"]["id"], loud);
        assert_eq!(body["counts"]["DONE"], 1, "{body}");
        db.assert_open_task_counts().await;
    }

    /// The deliverer sleeps through finishes that queue nothing (with
    /// several replicas it used to hear every one of them and ask the
    /// outbox for nothing) and wakes for one that queues a delivery.
    pub async fn only_queued_deliveries_wake_the_deliverer(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let woken = || heard(s.signals(), |s| &s.deliveries, Duration::ZERO);
        let quiet = json!({"name": "quiet", "tasks": noop_tasks(1)});
        s.plan_insert(&plan(quiet), "t".into(), Ts::now())
            .await
            .unwrap();
        let run = promote_and_claim(s.as_ref()).await[0];
        assert!(!woken().await, "a submit or a claim woke the deliverer");
        let report = s
            .run_finish_many("r-test", &[done(run)], Ts::now())
            .await
            .unwrap();
        assert_eq!(report.notified.len(), 1, "the plan completed");
        assert!(
            !woken().await,
            "a completion with no destination woke the deliverer"
        );

        s.plan_insert(&plan(own_webhook_only()), "t".into(), Ts::now())
            .await
            .unwrap();
        let run = promote_and_claim(s.as_ref()).await[0];
        assert!(!woken().await, "a submit or a claim woke the deliverer");
        s.run_finish_many("r-test", &[done(run)], Ts::now())
            .await
            .unwrap();
        assert!(
            woken().await,
            "a queued delivery did not wake the deliverer"
        );
    }
}

/// On PostgreSQL, a store that starts listening wakes every loop once, with
/// no NOTIFY sent: what other replicas announced before it listened (its
/// start, a lost connection) passed it by, and must not wait for a poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_loops_look_once_the_store_listens() {
    let db = TestDb::new(Kind::Postgres).await;
    let store = db.store().await;
    let listener = tokio::spawn({
        let store = store.clone();
        async move { store.signals_forward().await }
    });
    let signals = store.signals();
    let loops: [(&str, Pick); 4] = [
        ("changed", |s| &s.changed),
        ("available", |s| &s.available),
        ("canceled", |s| &s.canceled),
        ("deliveries", |s| &s.deliveries),
    ];
    for (name, pick) in loops {
        assert!(
            heard(signals, pick, Duration::from_secs(10)).await,
            "listening did not wake the {name} loop"
        );
    }
    listener.abort();
}

/// On PostgreSQL, other replicas' deliverers hear of a queued delivery
/// through NOTIFY at once, rather than at their next poll; a finish that
/// queues nothing tells them nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_other_replicas_hear_of_queued_deliveries() {
    let db = TestDb::new(Kind::Postgres).await;
    let here = db.store().await;
    let there = db.store().await;
    let listener = tokio::spawn({
        let there = there.clone();
        async move { there.signals_forward().await }
    });
    // Submit until the other store hears one: its LISTEN is then in place.
    let mut listening = false;
    for i in 0..100 {
        // Each on its own target, so one promotion round takes them all.
        let quiet = json!({"name": format!("quiet-{i}"), "tasks": [
            {"name": "a", "target": format!("quiet-{i}"), "sleep": "0s"}]});
        here.plan_insert(&plan(quiet), "t".into(), Ts::now())
            .await
            .unwrap();
        if heard(there.signals(), |s| &s.changed, Duration::from_millis(100)).await {
            listening = true;
            break;
        }
    }
    assert!(listening, "the other store never heard a submit");
    // Starting to listen woke every loop once; that is not what is
    // tested below.
    let others: [Pick; 3] = [|s| &s.available, |s| &s.canceled, |s| &s.deliveries];
    for pick in others {
        heard(there.signals(), pick, Duration::from_millis(10)).await;
    }

    let runs = promote_and_claim(here.as_ref()).await;
    let done_all: Vec<_> = runs.iter().map(|r| done(*r)).collect();
    let report = here
        .run_finish_many("r-test", &done_all, Ts::now())
        .await
        .unwrap();
    assert!(!report.notified.is_empty(), "the quiet plans completed");
    assert!(
        !heard(
            there.signals(),
            |s| &s.deliveries,
            Duration::from_millis(500)
        )
        .await,
        "completions with no destination woke the other deliverer"
    );

    here.plan_insert(&plan(own_webhook_only()), "t".into(), Ts::now())
        .await
        .unwrap();
    let runs = promote_and_claim(here.as_ref()).await;
    assert_eq!(runs.len(), 1, "every quiet run had finished");
    let report = here
        .run_finish_many("r-test", &[done(runs[0])], Ts::now())
        .await
        .unwrap();
    assert_eq!(report.notified[0].deliveries, 1);
    assert!(
        heard(there.signals(), |s| &s.deliveries, Duration::from_secs(10)).await,
        "the other deliverer did not hear of the queued delivery"
    );
    listener.abort();
}

/// One of a store's signals.
type Pick = fn(&Signals) -> &Notify;

/// Whether `pick`'s signal is raised within `within` (or, with zero, has
/// been already: the wait is polled once before its deadline).
async fn heard(signals: &Signals, pick: Pick, within: Duration) -> bool {
    tokio::time::timeout(within, pick(signals).notified())
        .await
        .is_ok()
}
