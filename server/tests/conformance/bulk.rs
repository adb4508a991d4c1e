//! Bulk actions on SQLite and PostgreSQL: Retry, Cancel and Skip change
//! exactly the runs the filter matches that they apply to, each with its
//! event naming who; a count that no longer matches what the operator saw
//! changes nothing; operators racing with one count change the runs once.

use std::sync::Arc;

use baton::store::{Finish, NotifyTargets, Store, StoreError};
use domain::filter::run::{self as run_filter, RunFilter};
use domain::model::{RunStatus, TaskStatus};
use domain::search::{BulkAction, BulkCounts, BulkResult};
use domain::time::Ts;
use serde_json::json;

use crate::common::store::{claim, failed, promote, task_named};
use crate::common::{Kind, TestDb, plan};
use crate::per_backend;

per_backend!(cases:
    retry_changes_what_the_filter_matches_once_and_only_at_the_count_seen,
    cancel_and_skip_apply_to_their_runs_and_release_dependents,
    operators_racing_one_bulk_retry_retry_each_task_once,
);

fn filter(pairs: &[(&str, &str)]) -> RunFilter {
    run_filter::parse(&crate::run_search::query(pairs), Ts::now().into()).unwrap()
}

/// `racers` operators press the same bulk Retry at once, each through
/// `act` (one store call, by `op-<i>`, with the count all of them saw,
/// `tasks`): one wins and retries every task once, the others are told
/// the count moved.
pub(crate) async fn race_bulk_retries<F, Fut>(
    db: &TestDb,
    s: &Arc<dyn Store>,
    racers: usize,
    tasks: i64,
    act: F,
) where
    F: Fn(Arc<dyn Store>, String) -> Fut,
    Fut: std::future::Future<Output = Result<BulkResult, StoreError>> + Send + 'static,
{
    let running: Vec<_> = (0..racers)
        .map(|i| tokio::spawn(act(s.clone(), format!("op-{i}"))))
        .collect();
    let mut won = 0;
    for r in running {
        match r.await.unwrap() {
            Ok(done) => {
                assert_eq!(done.changed, tasks);
                won += 1;
            }
            Err(StoreError::Conflict(m)) => {
                assert!(m.contains(&format!("you saw {tasks}")), "{m}")
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(won, 1, "one operator's retry, not two");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM task_run WHERE attempt = 2")
            .await,
        tasks
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM task_run WHERE attempt > 2")
            .await,
        0
    );
}

/// A plan `gated` whose task `then` depends on `first`, with `first`
/// claimed by `r-2` (and whatever else was AVAILABLE) and FAILED. The
/// plan id.
pub(crate) async fn gated_plan_failed_first(s: &dyn Store) -> i64 {
    let gated = s
        .plan_insert(
            &plan(json!({"name": "gated", "tasks": [
                {"name": "first", "target": "g/1", "sleep": "0s"},
                {"name": "then", "target": "g/2", "sleep": "0s", "depends_on": ["first"]},
            ]})),
            "bob".into(),
            Ts::now(),
        )
        .await
        .unwrap();
    promote(s).await;
    let claimed = s
        .run_claim_many(&claim("r-2", &[], 10), Ts::now())
        .await
        .unwrap();
    let first = claimed.iter().find(|c| c.plan_id == gated).unwrap().id;
    s.run_finish_many("r-2", &[failed(first)], Ts::now())
        .await
        .unwrap();
    gated
}

/// A plan `name` of `n` tasks on `db/<name>-<i>` and one on `svc/<name>`;
/// every run claimed by `r-1` and the `db/` ones failed. The plan id.
pub(crate) async fn failed_plan(s: &dyn Store, name: &str, n: usize) -> i64 {
    let mut tasks: Vec<_> = (0..n)
        .map(
            |i| json!({"name": format!("m{i}"), "target": format!("db/{name}-{i}"), "sleep": "0s"}),
        )
        .collect();
    tasks.push(json!({"name": "deploy", "target": format!("svc/{name}"), "sleep": "0s"}));
    let id = s
        .plan_insert(
            &plan(json!({"name": name, "tasks": tasks})),
            "alice".into(),
            Ts::now(),
        )
        .await
        .unwrap();
    promote(s).await;
    let claimed = s
        .run_claim_many(&claim("r-1", &[], 1000), Ts::now())
        .await
        .unwrap();
    let view = s.plan_get(id).await.unwrap();
    let finishes: Vec<Finish> = claimed
        .iter()
        .filter(|c| c.plan_id == id)
        .map(|c| {
            let task = view.tasks.iter().find(|t| t.id == c.task_id).unwrap();
            Finish {
                run_id: c.id,
                status: if task.name == "deploy" {
                    RunStatus::Done
                } else {
                    RunStatus::Failed
                },
                result_code: Some(1),
                error: Some("deadlock".into()),
            }
        })
        .collect();
    s.run_finish_many("r-1", &finishes, Ts::now())
        .await
        .unwrap();
    id
}

mod cases {
    use super::*;

    pub async fn retry_changes_what_the_filter_matches_once_and_only_at_the_count_seen(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        // With a webhook, each failed plan claims its notification, which
        // a retry must clear.
        s.notify_targets_set(NotifyTargets {
            webhook_url: Some("http://ops.example/hook".into()),
            public_url: "http://baton.example".into(),
        });
        let s = s.as_ref();
        let orders = failed_plan(s, "orders", 3).await;
        let users = failed_plan(s, "users", 2).await;
        for id in [orders, users] {
            let view = s.plan_get(id).await.unwrap();
            assert!(view.notification.is_some(), "plan {id} claimed its failure");
        }
        let db_failed = filter(&[("target", "db/"), ("status", "FAILED")]);
        assert_eq!(
            s.run_bulk_counts(&db_failed).await.unwrap(),
            BulkCounts {
                ended_badly: 5,
                live: 0
            }
        );
        let only_orders = filter(&[("target", "db/orders")]);
        assert_eq!(
            s.run_bulk_counts(&only_orders).await.unwrap().ended_badly,
            3
        );

        // Seen 4, there are 5: refused, naming both, and nothing changes.
        let runs_before = db.count("SELECT COUNT(*) FROM task_run").await;
        let events_before = db.count(crate::common::HISTORY_COUNT).await;
        let e = s
            .run_bulk(&db_failed, BulkAction::Retry, 4, "ops".into(), Ts::now())
            .await
            .unwrap_err();
        assert!(
            matches!(&e, StoreError::Conflict(m) if m.contains("now matches 5 runs to retry, you saw 4")),
            "{e}"
        );
        assert_eq!(db.count("SELECT COUNT(*) FROM task_run").await, runs_before);
        assert_eq!(db.count(crate::common::HISTORY_COUNT).await, events_before);

        // At the count seen: one new attempt each, created by ops.
        let done = s
            .run_bulk(&db_failed, BulkAction::Retry, 5, "ops".into(), Ts::now())
            .await
            .unwrap();
        assert_eq!(done.changed, 5);
        for id in [orders, users] {
            let view = s.plan_get(id).await.unwrap();
            assert!(view.notification.is_none(), "a retry starts a new phase");
            for task in view.tasks.iter().filter(|t| t.name != "deploy") {
                assert_eq!(
                    (task.status, task.attempt),
                    (TaskStatus::Pending, Some(2)),
                    "{}",
                    task.name
                );
                let run = s.run_get(task.run_id.unwrap()).await.unwrap();
                let created = &run.events[0];
                assert_eq!(created.actor, "ops");
                assert_eq!(
                    created.detail.as_deref(),
                    Some("retried by ops (bulk, 5 runs)")
                );
            }
            assert_eq!(
                task_named(&view, "deploy").attempt,
                Some(1),
                "DONE is not retried"
            );
        }
        // The new attempts are no longer FAILED: the same action again has
        // nothing to do, and the actor filter finds what ops did.
        assert_eq!(s.run_bulk_counts(&db_failed).await.unwrap().ended_badly, 0);
        let e = s
            .run_bulk(&db_failed, BulkAction::Retry, 0, "ops".into(), Ts::now())
            .await
            .unwrap_err();
        assert!(
            matches!(&e, StoreError::Conflict(m) if m.contains("matches no run")),
            "{e}"
        );
        let by_ops = s
            .run_search(&filter(&[("actor", "ops")]), None, 50)
            .await
            .unwrap();
        assert_eq!(by_ops.runs.len(), 5);
    }

    pub async fn cancel_and_skip_apply_to_their_runs_and_release_dependents(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let failed = failed_plan(s, "orders", 2).await;
        // A plan whose runs wait behind a dependency: all PENDING or
        // AVAILABLE, none claimed.
        let waiting = s
            .plan_insert(
                &plan(json!({"name": "waiting", "tasks": [
                    {"name": "a", "target": "q/a", "sleep": "0s"},
                    {"name": "b", "target": "q/b", "sleep": "0s", "depends_on": ["a"]},
                ]})),
                "bob".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        let live = filter(&[("plan", "WAIT")]);
        assert_eq!(
            s.run_bulk_counts(&live).await.unwrap(),
            BulkCounts {
                ended_badly: 0,
                live: 2
            }
        );
        let done = s
            .run_bulk(&live, BulkAction::Cancel, 2, "dave".into(), Ts::now())
            .await
            .unwrap();
        assert_eq!(done.changed, 2);
        let view = s.plan_get(waiting).await.unwrap();
        assert!(view.tasks.iter().all(|t| t.status == TaskStatus::Canceled));
        let run = s.run_get(view.tasks[0].run_id.unwrap()).await.unwrap();
        let last = run.events.last().unwrap();
        assert_eq!(
            (last.to, last.actor.as_str()),
            (RunStatus::Canceled, "dave")
        );

        // Skip: a dependent of a skipped task is released.
        let gated = gated_plan_failed_first(s).await;
        let ended = filter(&[("status", "FAILED")]);
        assert_eq!(s.run_bulk_counts(&ended).await.unwrap().ended_badly, 3);
        let done = s
            .run_bulk(&ended, BulkAction::Skip, 3, "erin".into(), Ts::now())
            .await
            .unwrap();
        assert_eq!(done.changed, 3);
        let view = s.plan_get(failed).await.unwrap();
        assert_eq!(
            view.tasks
                .iter()
                .filter(|t| t.status == TaskStatus::Skipped)
                .count(),
            2
        );
        let then = s.plan_get(gated).await.unwrap();
        assert_eq!(task_named(&then, "first").status, TaskStatus::Skipped);
        promote(s).await;
        let then = s.plan_get(gated).await.unwrap();
        assert_eq!(
            task_named(&then, "then").status,
            TaskStatus::Available,
            "a skipped dependency releases its dependent"
        );
        // Each skipped run says who skipped it.
        let by_erin = s
            .run_search(&filter(&[("actor", "erin")]), None, 50)
            .await
            .unwrap();
        assert_eq!(by_erin.runs.len(), 3);
        assert_eq!(s.run_bulk_counts(&ended).await.unwrap().ended_badly, 0);
    }

    pub async fn operators_racing_one_bulk_retry_retry_each_task_once(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        failed_plan(s.as_ref(), "race", 40).await;
        let f = Arc::new(filter(&[("status", "FAILED")]));
        assert_eq!(s.run_bulk_counts(&f).await.unwrap().ended_badly, 40);
        race_bulk_retries(&db, &s, 8, 40, move |s, by| {
            let f = f.clone();
            async move {
                s.run_bulk(&f, BulkAction::Retry, 40, by.as_str().into(), Ts::now())
                    .await
            }
        })
        .await;
    }
}
