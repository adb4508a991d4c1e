//! Bulk actions on the plans list, on SQLite and PostgreSQL: Retry, Cancel
//! and Skip change the runs of exactly the plans the status and name
//! filter matches, each with its event naming who, and one audit entry; a
//! count that no longer matches what the operator saw (a task failed in
//! between) changes nothing; operators racing with one count change the
//! runs once.

use std::sync::Arc;

use baton::store::{NotifyTargets, Store, StoreError};
use domain::audit::Outcome;
use domain::filter::audit::AuditFilter;
use domain::filter::plan as plan_filter;
use domain::model::{RunStatus, TaskStatus};
use domain::search::PlanFilter;
use domain::search::{BulkAction, PlanBulkCount, PlanBulkCounts, PlanQuery};
use domain::time::Ts;
use serde_json::json;

use crate::bulk::{failed_plan, gated_plan_failed_first, race_bulk_retries};
use crate::common::store::{promote, task_named};
use crate::common::{Kind, TestDb, plan};
use crate::per_backend;

per_backend!(cases:
    retry_changes_the_matched_plans_runs_only_at_the_count_seen,
    cancel_and_skip_apply_to_the_matched_plans_runs,
    operators_racing_one_plans_bulk_retry_retry_each_task_once,
);

fn filter(status: Option<&str>, name: Option<&str>) -> PlanFilter {
    plan_filter::parse_for_bulk(&PlanQuery {
        status: status.map(Into::into),
        name: name.map(Into::into),
    })
    .unwrap()
}

fn count(runs: i64, plans: i64) -> PlanBulkCount {
    PlanBulkCount { runs, plans }
}

/// The newest audit entry.
async fn last_entry(s: &dyn Store) -> domain::audit::AuditEntry {
    s.audit_list(&AuditFilter::default(), None, 1)
        .await
        .unwrap()
        .entries
        .remove(0)
}

mod cases {
    use super::*;

    pub async fn retry_changes_the_matched_plans_runs_only_at_the_count_seen(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        // With a webhook, each failed plan claims its notification, which
        // a retry must clear.
        s.notify_targets_set(NotifyTargets {
            webhook_url: Some("http://ops.example/hook".into()),
            public_url: "http://baton.example".into(),
        });
        let s = s.as_ref();
        let eu = failed_plan(s, "orders-eu", 2).await;
        let us = failed_plan(s, "orders-us", 3).await;
        let billing = failed_plan(s, "billing", 1).await;
        let orders = filter(Some("failed"), Some("ORDERS"));
        assert_eq!(
            s.plan_bulk_counts(&orders).await.unwrap(),
            PlanBulkCounts {
                ended_badly: count(5, 2),
                live: count(0, 0),
            }
        );

        // Another plan the filter matches fails after the count was shown:
        // the action is refused naming both numbers, and nothing changes.
        let ap = failed_plan(s, "orders-ap", 1).await;
        let runs_before = db.count("SELECT COUNT(*) FROM task_run").await;
        let events_before = db.count(crate::common::HISTORY_COUNT).await;
        let e = s
            .plan_bulk(&orders, BulkAction::Retry, 5, "ops".into(), Ts::now())
            .await
            .unwrap_err();
        assert!(
            matches!(&e, StoreError::Conflict(m) if m.contains("now matches 6 runs to retry, you saw 5")),
            "{e}"
        );
        assert_eq!(db.count("SELECT COUNT(*) FROM task_run").await, runs_before);
        assert_eq!(db.count(crate::common::HISTORY_COUNT).await, events_before);
        let refused = last_entry(s).await;
        assert_eq!(
            (refused.action.as_str(), refused.outcome),
            ("plans.bulk_retry", Outcome::Refused)
        );
        assert!(refused.detail.contains("you saw 5"), "{}", refused.detail);

        // At the count seen: one new attempt each, created by ops.
        let done = s
            .plan_bulk(&orders, BulkAction::Retry, 6, "ops".into(), Ts::now())
            .await
            .unwrap();
        assert_eq!(done.changed, 6);
        for id in [eu, us, ap] {
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
                    Some("retried by ops (bulk, 6 runs)")
                );
            }
            assert_eq!(
                task_named(&view, "deploy").attempt,
                Some(1),
                "DONE is not retried"
            );
        }
        let untouched = s.plan_get(billing).await.unwrap();
        assert_eq!(
            (untouched.tasks[0].status, untouched.tasks[0].attempt),
            (TaskStatus::Failed, Some(1)),
            "a plan the name does not match is left alone"
        );
        assert!(untouched.notification.is_some());
        let entry = last_entry(s).await;
        assert_eq!(
            (
                entry.action.as_str(),
                entry.outcome,
                entry.actor.as_str(),
                entry.subject.as_str(),
                entry.detail.as_str()
            ),
            (
                "plans.bulk_retry",
                Outcome::Done,
                "ops",
                "plans status=FAILED name=ORDERS",
                "6 runs"
            )
        );

        // The plans run again, so the FAILED list no longer holds them.
        assert_eq!(
            s.plan_bulk_count(&orders, BulkAction::Retry).await.unwrap(),
            count(0, 0)
        );
        let e = s
            .plan_bulk(&orders, BulkAction::Retry, 0, "ops".into(), Ts::now())
            .await
            .unwrap_err();
        assert!(
            matches!(&e, StoreError::Conflict(m) if m.contains("matches no run")),
            "{e}"
        );
    }

    pub async fn cancel_and_skip_apply_to_the_matched_plans_runs(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let gamma = failed_plan(s, "gamma", 2).await;
        // Two plans whose runs wait (one behind a dependency), none
        // claimed; and a third of another name.
        let waiting = |name: &str| {
            plan(json!({"name": name, "tasks": [
                {"name": "a", "target": format!("q/{name}-a"), "sleep": "0s"},
                {"name": "b", "target": format!("q/{name}-b"), "sleep": "0s", "depends_on": ["a"]},
            ]}))
        };
        let mut nightly = Vec::new();
        for name in ["nightly-a", "nightly-b", "weekly"] {
            let id = s
                .plan_insert(&waiting(name), "bob".into(), Ts::now())
                .await
                .unwrap();
            nightly.push(id);
        }
        let weekly = nightly.pop().unwrap();
        let by_name = filter(None, Some("nightly"));
        assert_eq!(
            s.plan_bulk_counts(&by_name).await.unwrap(),
            PlanBulkCounts {
                ended_badly: count(0, 0),
                live: count(4, 2),
            }
        );
        let done = s
            .plan_bulk(&by_name, BulkAction::Cancel, 4, "dave".into(), Ts::now())
            .await
            .unwrap();
        assert_eq!(done.changed, 4);
        for id in &nightly {
            let view = s.plan_get(*id).await.unwrap();
            assert!(view.tasks.iter().all(|t| t.status == TaskStatus::Canceled));
            let run = s.run_get(view.tasks[0].run_id.unwrap()).await.unwrap();
            let last = run.events.last().unwrap();
            assert_eq!(
                (last.to, last.actor.as_str()),
                (RunStatus::Canceled, "dave")
            );
        }
        let weekly_view = s.plan_get(weekly).await.unwrap();
        assert!(
            weekly_view
                .tasks
                .iter()
                .all(|t| t.status != TaskStatus::Canceled),
            "a plan the name does not match keeps running"
        );
        assert_eq!(last_entry(s).await.subject, "plans name=nightly");

        // Skip: the failed tasks of the plans named `ga…` are skipped, and
        // a dependent is released.
        let gated = gated_plan_failed_first(s).await;
        // The status is the plan's: `gated` is HALTED (its dependent is
        // blocked behind the failure), which the FAILED list includes, and
        // the nightly plans are CANCELED, so the list holds gamma and gated.
        assert_eq!(
            s.plan_bulk_count(&filter(Some("FAILED"), None), BulkAction::Skip)
                .await
                .unwrap(),
            count(3, 2)
        );
        assert_eq!(
            s.plan_bulk_count(&filter(Some("HALTED"), None), BulkAction::Skip)
                .await
                .unwrap(),
            count(1, 1)
        );
        let ga = filter(None, Some("ga"));
        assert_eq!(
            s.plan_bulk_count(&ga, BulkAction::Skip).await.unwrap(),
            count(3, 2)
        );
        let done = s
            .plan_bulk(&ga, BulkAction::Skip, 3, "erin".into(), Ts::now())
            .await
            .unwrap();
        assert_eq!(done.changed, 3);
        let view = s.plan_get(gamma).await.unwrap();
        assert_eq!(
            view.tasks
                .iter()
                .filter(|t| t.status == TaskStatus::Skipped)
                .count(),
            2
        );
        promote(s).await;
        let then = s.plan_get(gated).await.unwrap();
        assert_eq!(task_named(&then, "first").status, TaskStatus::Skipped);
        assert_eq!(
            task_named(&then, "then").status,
            TaskStatus::Available,
            "a skipped dependency releases its dependent"
        );
        for id in &nightly {
            let view = s.plan_get(*id).await.unwrap();
            assert!(
                view.tasks.iter().all(|t| t.status == TaskStatus::Canceled),
                "plans the name does not match are left alone"
            );
        }
        let by_erin = s
            .run_search(
                &domain::filter::run::parse(
                    &crate::run_search::query(&[("actor", "erin")]),
                    Ts::now().into(),
                )
                .unwrap(),
                None,
                50,
            )
            .await
            .unwrap();
        assert_eq!(by_erin.runs.len(), 3, "each skipped run says who");
        assert_eq!(
            s.plan_bulk_count(&ga, BulkAction::Skip).await.unwrap(),
            count(0, 0)
        );
    }

    pub async fn operators_racing_one_plans_bulk_retry_retry_each_task_once(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        failed_plan(s.as_ref(), "race-1", 20).await;
        failed_plan(s.as_ref(), "race-2", 20).await;
        let f = Arc::new(filter(None, Some("race")));
        assert_eq!(
            s.plan_bulk_count(&f, BulkAction::Retry).await.unwrap(),
            count(40, 2)
        );
        race_bulk_retries(&db, &s, 6, 40, move |s, by| {
            let f = f.clone();
            async move {
                s.plan_bulk(&f, BulkAction::Retry, 40, by.as_str().into(), Ts::now())
                    .await
            }
        })
        .await;
    }
}
