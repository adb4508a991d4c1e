//! HALTED plans on SQLite and PostgreSQL (docs/design.md, "Status
//! model"): a plan in which nothing can move without an operator says so,
//! whichever way it halted (a version line, `depends_on`, a stage, an
//! approval refused by canceling the task), in its view, the list, every
//! status filter (FAILED includes it) and the bulk counts; a Retry or a
//! Skip makes it RUNNING again, and a plan with anything left to move is
//! not halted.

use baton::store::Store;
use domain::gates::NodeLabels;
use domain::model::{PlanStatus, TaskStatus};
use domain::time::Ts;
use serde_json::json;

use crate::common::store::{claim, failed, promote, task_named};
use crate::common::{Kind, TestDb};
use crate::{per_backend, submit};

per_backend!(cases:
    a_failed_version_halts_its_plan_and_the_plans_behind_it,
    a_failed_dependency_halts_the_plan_until_skipped,
    a_failed_stage_halts_the_stages_after_it,
    an_approval_refused_by_a_cancel_halts_what_depends_on_it,
    a_plan_with_work_left_to_move_is_not_halted,
);

/// Claims every AVAILABLE run as `r-test` and fails those of `names`.
async fn fail(s: &dyn Store, id: i64, names: &[&str]) {
    promote(s).await;
    s.run_claim_many(&claim("r-test", &[], 100), Ts::now())
        .await
        .unwrap();
    let view = s.plan_get(id).await.unwrap();
    let runs: Vec<_> = names
        .iter()
        .map(|n| failed(task_named(&view, n).run_id.unwrap()))
        .collect();
    let report = s.run_finish_many("r-test", &runs, Ts::now()).await.unwrap();
    assert_eq!(report.finished.len(), names.len());
    // The round that writes the version lines' causes.
    promote(s).await;
}

/// Plan `id` is `status` in its view and in the list, and each status
/// filter lists it exactly when it should (FAILED also lists HALTED).
async fn assert_status(s: &dyn Store, id: i64, status: PlanStatus) {
    let view = s.plan_get(id).await.unwrap();
    assert_eq!(view.status, status, "plan {}: {:?}", view.name, view.tasks);
    let listed = s.plan_list(None, None, 100, 0).await.unwrap();
    let summary = listed.plans.iter().find(|p| p.id == id).unwrap();
    assert_eq!(
        summary.status, status,
        "the list agrees on plan {}",
        view.name
    );
    let blocked = view
        .tasks
        .iter()
        .filter(|t| {
            t.waiting_cause
                .as_deref()
                .is_some_and(|c| c.starts_with(domain::model::BLOCKED_CAUSE))
        })
        .count() as i64;
    assert_eq!(summary.blocked, blocked, "plan {}", view.name);
    for filter in PlanStatus::ALL {
        let found = s.plan_list(Some(filter), None, 100, 0).await.unwrap();
        let listed = found.plans.iter().any(|p| p.id == id);
        let expected =
            filter == status || (filter == PlanStatus::Failed && status == PlanStatus::Halted);
        assert_eq!(
            listed, expected,
            "plan {} ({status}) under the {filter} filter",
            view.name
        );
        assert_eq!(found.total, found.plans.len() as i64, "{filter}");
    }
}

mod cases {
    use super::*;

    pub async fn a_failed_version_halts_its_plan_and_the_plans_behind_it(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let first = submit(
            s.as_ref(),
            json!({"name": "first", "tasks": [
                {"name": "v1", "target": "db/orders", "version": "0001", "sleep": "1h"},
                {"name": "v2", "target": "db/orders", "version": "0002", "sleep": "1h"},
            ]}),
        )
        .await;
        let behind = submit(
            s.as_ref(),
            json!({"name": "behind", "tasks": [
                {"name": "v3", "target": "db/orders", "version": "0003", "sleep": "1h"},
            ]}),
        )
        .await;
        assert_status(s.as_ref(), first, PlanStatus::Running).await;
        fail(s.as_ref(), first, &["v1"]).await;
        let view = s.plan_get(first).await.unwrap();
        assert_eq!(
            task_named(&view, "v2").waiting_cause.as_deref(),
            Some("blocked: version 0001 on db/orders FAILED — retry or skip it")
        );
        assert_status(s.as_ref(), first, PlanStatus::Halted).await;
        assert_status(s.as_ref(), behind, PlanStatus::Halted).await;
        // The Targets page and API say where the line stopped.
        let line = |targets: Vec<domain::model::TargetView>| {
            let orders = targets.into_iter().find(|t| t.target == "db/orders");
            orders.and_then(|t| t.halted_by)
        };
        assert_eq!(
            line(s.target_list().await.unwrap()),
            Some(domain::model::HaltedLine {
                version: "0001".into(),
                run_id: task_named(&view, "v1").run_id.unwrap(),
                status: domain::model::RunStatus::Failed,
            })
        );

        // A retry lets the line move: both plans run again.
        let v1 = task_named(&view, "v1").id;
        s.task_retry(v1, "alice".into(), Ts::now()).await.unwrap();
        assert_status(s.as_ref(), first, PlanStatus::Running).await;
        promote(s.as_ref()).await;
        assert_status(s.as_ref(), behind, PlanStatus::Running).await;
        assert_eq!(line(s.target_list().await.unwrap()), None);
    }

    pub async fn a_failed_dependency_halts_the_plan_until_skipped(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let id = submit(
            s.as_ref(),
            json!({"name": "deps", "tasks": [
                {"name": "build", "target": "a", "sleep": "1h"},
                {"name": "test", "target": "b", "sleep": "1h", "depends_on": ["build"]},
                {"name": "ship", "target": "c", "sleep": "1h", "depends_on": ["test"]},
            ]}),
        )
        .await;
        fail(s.as_ref(), id, &["build"]).await;
        let view = s.plan_get(id).await.unwrap();
        assert_eq!(
            task_named(&view, "test").waiting_cause.as_deref(),
            Some("blocked: dependency build FAILED — retry or skip it")
        );
        assert_eq!(task_named(&view, "ship").status, TaskStatus::Pending);
        assert_status(s.as_ref(), id, PlanStatus::Halted).await;

        let build = task_named(&view, "build").id;
        s.task_skip(build, "alice".into(), Ts::now()).await.unwrap();
        assert_status(s.as_ref(), id, PlanStatus::Running).await;
    }

    pub async fn a_failed_stage_halts_the_stages_after_it(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let id = submit(
            s.as_ref(),
            json!({"name": "release", "stages": [{"name": "migrate"}, {"name": "deploy"}],
            "tasks": [
                {"name": "m1", "target": "db/a", "sleep": "1h", "stage": "migrate"},
                {"name": "d1", "target": "svc/a", "sleep": "1h", "stage": "deploy"},
                {"name": "d2", "target": "svc/b", "sleep": "1h", "stage": "deploy"},
            ]}),
        )
        .await;
        fail(s.as_ref(), id, &["m1"]).await;
        assert_status(s.as_ref(), id, PlanStatus::Halted).await;
        let view = s.plan_get(id).await.unwrap();
        s.task_retry(task_named(&view, "m1").id, "alice".into(), Ts::now())
            .await
            .unwrap();
        assert_status(s.as_ref(), id, PlanStatus::Running).await;
    }

    pub async fn an_approval_refused_by_a_cancel_halts_what_depends_on_it(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let id = submit(
            s.as_ref(),
            json!({"name": "approve", "tasks": [
                {"name": "drop", "target": "db/a", "sleep": "1h", "approval": "required"},
                {"name": "after", "target": "db/b", "sleep": "1h", "depends_on": ["drop"]},
            ]}),
        )
        .await;
        promote(s.as_ref()).await;
        // Waiting for a person is not a halt: the approval moves it.
        assert_status(s.as_ref(), id, PlanStatus::Running).await;
        let view = s.plan_get(id).await.unwrap();
        s.task_cancel(task_named(&view, "drop").id, "bob".into(), Ts::now())
            .await
            .unwrap();
        let view = s.plan_get(id).await.unwrap();
        assert_eq!(
            task_named(&view, "after").waiting_cause.as_deref(),
            Some("blocked: dependency drop CANCELED — retry or skip it")
        );
        assert_status(s.as_ref(), id, PlanStatus::Halted).await;
    }

    pub async fn a_plan_with_work_left_to_move_is_not_halted(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let id = submit(
            s.as_ref(),
            json!({"name": "mixed", "tasks": [
                {"name": "bad", "target": "a", "sleep": "1h"},
                {"name": "after", "target": "b", "sleep": "1h", "depends_on": ["bad"]},
                {"name": "flaky", "target": "c", "sleep": "1h", "max_attempts": 2},
                {"name": "other", "target": "d", "sleep": "1h", "depends_on": ["flaky"]},
            ]}),
        )
        .await;
        fail(s.as_ref(), id, &["bad", "flaky"]).await;
        // `after` is blocked, but flaky's automatic retry is on its way.
        let view = s.plan_get(id).await.unwrap();
        assert_eq!(task_named(&view, "flaky").status, TaskStatus::Pending);
        assert_status(s.as_ref(), id, PlanStatus::Running).await;
        // Once flaky fails for good too, nothing can move.
        let retry = task_named(&view, "flaky").run_id.unwrap();
        s.run_promote_round(
            &NodeLabels::default(),
            None,
            Ts::now().plus(std::time::Duration::from_secs(5)),
        )
        .await
        .unwrap();
        let got = s
            .run_claim_many(&claim("r-test", &[], 10), Ts::now())
            .await
            .unwrap();
        assert_eq!(got.iter().map(|c| c.id).collect::<Vec<_>>(), vec![retry]);
        s.run_finish_many("r-test", &[failed(retry)], Ts::now())
            .await
            .unwrap();
        promote(s.as_ref()).await;
        assert_status(s.as_ref(), id, PlanStatus::Halted).await;
    }
}
