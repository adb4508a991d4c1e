//! The workflow gates on SQLite and PostgreSQL (docs/design.md, "Gates":
//! gates 2 and 6–9): halt on failure, dependencies and stages, approvals,
//! pausing a plan or a target, and target capacity; each with its waiting
//! cause, the action that releases it, and the refusals that change
//! nothing.

use baton::store::{Store, StoreError};
use domain::model::{PlanView, TaskStatus};
use domain::time::Ts;
use serde_json::json;

use crate::common::store::{claim, done, failed, promote, promote_and_claim, task_named};
use crate::common::{Kind, TestDb};
use crate::{per_backend, submit};

per_backend!(cases:
    a_failed_version_halts_the_later_ones_until_retried_or_skipped,
    dependencies_wait_name_what_they_wait_for_and_release_on_done_or_skip,
    a_failed_dependency_blocks_until_retried,
    stages_run_in_order,
    approvals_release_a_task_and_refuse_the_wrong_people,
    a_stage_approval_releases_the_whole_stage,
    a_stage_approval_leaves_a_task_with_its_own_rule_to_that_rule,
    a_paused_plan_or_target_promotes_nothing_until_resumed,
    capacity_caps_the_runs_holding_a_target,
    a_version_waiting_for_a_dependency_still_holds_larger_versions,
);

async fn view(s: &dyn Store, id: i64) -> PlanView {
    s.plan_get(id).await.unwrap()
}

fn cause<'a>(v: &'a PlanView, name: &str) -> &'a str {
    task_named(v, name).waiting_cause.as_deref().unwrap_or("")
}

fn status(v: &PlanView, name: &str) -> TaskStatus {
    task_named(v, name).status
}

/// Claims every AVAILABLE run and finishes those of `names` with `how`.
async fn run_to_end(s: &dyn Store, id: i64, names: &[&str], ok: bool) {
    let v = view(s, id).await;
    s.run_claim_many(&claim("r-test", &[], 1000), Ts::now())
        .await
        .unwrap();
    let finishes: Vec<_> = names
        .iter()
        .map(|n| {
            let run = task_named(&v, n).run_id.unwrap();
            if ok { done(run) } else { failed(run) }
        })
        .collect();
    s.run_finish_many("r-test", &finishes, Ts::now())
        .await
        .unwrap();
}

fn conflict<T: std::fmt::Debug>(r: Result<T, StoreError>, words: &str) {
    match r {
        Err(StoreError::Conflict(m)) => assert!(m.contains(words), "{m}"),
        other => panic!("expected a conflict about {words:?}, got {other:?}"),
    }
}

fn forbidden<T: std::fmt::Debug>(r: Result<T, StoreError>, words: &str) {
    match r {
        Err(StoreError::Forbidden(m)) => assert!(m.contains(words), "{m}"),
        other => panic!("expected a refusal about {words:?}, got {other:?}"),
    }
}

mod cases {
    use super::*;

    pub async fn a_failed_version_halts_the_later_ones_until_retried_or_skipped(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let id = submit(
            s,
            json!({"name": "migrations", "tasks": [
                {"name": "m41", "target": "db/orders", "version": "0041", "sleep": "0s"},
                {"name": "m42", "target": "db/orders", "version": "0042", "sleep": "0s"},
                {"name": "m43", "target": "db/orders", "version": "0043", "sleep": "0s"},
                {"name": "other", "target": "db/users", "version": "0042", "sleep": "0s"},
            ]}),
        )
        .await;
        promote(s).await;
        run_to_end(s, id, &["m41"], false).await;
        promote(s).await;
        let v = view(s, id).await;
        assert_eq!(status(&v, "m41"), TaskStatus::Failed);
        for later in ["m42", "m43"] {
            assert_eq!(status(&v, later), TaskStatus::Pending);
            assert_eq!(
                cause(&v, later),
                "blocked: version 0041 on db/orders FAILED — retry or skip it"
            );
        }
        assert_ne!(
            status(&v, "other"),
            TaskStatus::Pending,
            "another target runs"
        );
        // A second plan's later version on the same target halts too.
        let later = submit(
            s,
            json!({"name": "more", "tasks": [
                {"name": "m44", "target": "db/orders", "version": "0044", "sleep": "0s"}]}),
        )
        .await;
        promote(s).await;
        assert!(cause(&view(s, later).await, "m44").starts_with("blocked: version 0041"));

        // Retry: the new attempt runs first, the others wait for it.
        let m41 = task_named(&v, "m41").id;
        s.task_retry(m41, "alice".into(), Ts::now()).await.unwrap();
        promote(s).await;
        let v = view(s, id).await;
        assert_eq!(status(&v, "m41"), TaskStatus::Available);
        assert!(
            cause(&v, "m42").starts_with("waits for run #"),
            "{}",
            cause(&v, "m42")
        );
        // It fails again (cancelled this time), and a skip releases m42.
        s.task_cancel(m41, "alice".into(), Ts::now()).await.unwrap();
        promote(s).await;
        assert_eq!(
            cause(&view(s, id).await, "m42"),
            "blocked: version 0041 on db/orders CANCELED — retry or skip it"
        );
        s.task_skip(m41, "alice".into(), Ts::now()).await.unwrap();
        promote(s).await;
        let v = view(s, id).await;
        assert_eq!(status(&v, "m42"), TaskStatus::Available);
        assert!(cause(&v, "m43").starts_with("waits for run #"));
    }

    pub async fn dependencies_wait_name_what_they_wait_for_and_release_on_done_or_skip(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        // A diamond: a → (b, c) → d.
        let id = submit(
            s,
            json!({"name": "diamond", "tasks": [
                {"name": "a", "target": "t/a", "sleep": "0s"},
                {"name": "b", "target": "t/b", "sleep": "0s", "depends_on": ["a"]},
                {"name": "c", "target": "t/c", "sleep": "0s", "depends_on": ["a"]},
                {"name": "d", "target": "t/d", "sleep": "0s", "depends_on": ["b", "c"]},
            ]}),
        )
        .await;
        let v = view(s, id).await;
        assert_eq!(cause(&v, "b"), "waits for a (PENDING)");
        assert_eq!(cause(&v, "d"), "waits for b (PENDING) and 1 more");
        assert_eq!(task_named(&v, "d").depends_on, vec!["b", "c"]);
        assert_eq!(task_named(&v, "a").dependents, vec!["b", "c"]);
        let report = promote(s).await;
        assert_eq!(report.promoted, 1, "only a may start");
        assert_eq!(cause(&view(s, id).await, "b"), "waits for a (AVAILABLE)");
        s.run_claim_many(&claim("r-test", &[], 10), Ts::now())
            .await
            .unwrap();
        assert_eq!(cause(&view(s, id).await, "c"), "waits for a (RUNNING)");
        run_to_end(s, id, &["a"], true).await;
        let v = view(s, id).await;
        assert_eq!(cause(&v, "b"), "waiting for the scheduler's next round");
        promote(s).await;
        let v = view(s, id).await;
        assert_eq!(status(&v, "b"), TaskStatus::Available);
        assert_eq!(status(&v, "c"), TaskStatus::Available);
        assert_eq!(status(&v, "d"), TaskStatus::Pending);
        s.run_claim_many(&claim("r-test", &[], 10), Ts::now())
            .await
            .unwrap();
        run_to_end(s, id, &["b"], true).await;
        promote(s).await;
        let v = view(s, id).await;
        assert_eq!(cause(&v, "d"), "waits for c (RUNNING)");
        // c fails; d is blocked until c is skipped.
        run_to_end(s, id, &["c"], false).await;
        promote(s).await;
        let v = view(s, id).await;
        assert_eq!(
            cause(&v, "d"),
            "blocked: dependency c FAILED — retry or skip it"
        );
        s.task_skip(task_named(&v, "c").id, "alice".into(), Ts::now())
            .await
            .unwrap();
        promote(s).await;
        assert_eq!(status(&view(s, id).await, "d"), TaskStatus::Available);
        db.assert_open_task_counts().await;
    }

    pub async fn a_failed_dependency_blocks_until_retried(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let id = submit(
            s,
            json!({"name": "p", "tasks": [
                {"name": "migrate", "target": "db/orders", "sleep": "0s"},
                {"name": "deploy", "target": "svc/api", "sleep": "0s", "depends_on": ["migrate"]},
            ]}),
        )
        .await;
        promote(s).await;
        run_to_end(s, id, &["migrate"], false).await;
        let v = view(s, id).await;
        assert_eq!(
            cause(&v, "deploy"),
            "blocked: dependency migrate FAILED — retry or skip it"
        );
        // Cancelling the waiting deploy and retrying it keeps it held.
        let deploy = task_named(&v, "deploy").id;
        s.task_cancel(deploy, "alice".into(), Ts::now())
            .await
            .unwrap();
        s.task_retry(deploy, "alice".into(), Ts::now())
            .await
            .unwrap();
        promote(s).await;
        let v = view(s, id).await;
        assert_eq!(status(&v, "deploy"), TaskStatus::Pending);
        assert_eq!(
            cause(&v, "deploy"),
            "blocked: dependency migrate FAILED — retry or skip it"
        );
        s.task_retry(task_named(&v, "migrate").id, "alice".into(), Ts::now())
            .await
            .unwrap();
        assert_eq!(
            cause(&view(s, id).await, "deploy"),
            "waits for migrate (PENDING)"
        );
        promote_and_claim(s).await;
        run_to_end(s, id, &["migrate"], true).await;
        promote(s).await;
        assert_eq!(status(&view(s, id).await, "deploy"), TaskStatus::Available);
    }

    pub async fn stages_run_in_order(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let id = submit(
            s,
            json!({"name": "release", "stages": [{"name": "migrate"}, {"name": "deploy"}],
            "tasks": [
                {"name": "m1", "target": "db/a", "sleep": "0s", "stage": "migrate"},
                {"name": "m2", "target": "db/b", "sleep": "0s", "stage": "migrate"},
                {"name": "d1", "target": "svc/a", "sleep": "0s", "stage": "deploy"},
                {"name": "d2", "target": "svc/b", "sleep": "0s", "stage": "deploy"},
            ]}),
        )
        .await;
        let v = view(s, id).await;
        assert_eq!(v.stages.len(), 2);
        assert_eq!(task_named(&v, "d2").stage.as_deref(), Some("deploy"));
        assert_eq!(task_named(&v, "d2").depends_on, vec!["m1", "m2"]);
        assert_eq!(promote(s).await.promoted, 2);
        run_to_end(s, id, &["m1"], true).await;
        promote(s).await;
        let v = view(s, id).await;
        // The stage is named: the task waits for all of it.
        assert_eq!(cause(&v, "d1"), "waits for stage migrate: m2 (RUNNING)");
        run_to_end(s, id, &["m2"], true).await;
        assert_eq!(promote(s).await.promoted, 2);
    }

    pub async fn approvals_release_a_task_and_refuse_the_wrong_people(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let id = s
            .plan_insert(
                &crate::common::plan(json!({"name": "p", "tasks": [
                    {"name": "drop", "target": "db/a", "sleep": "0s", "approval": "two-person"},
                    {"name": "only", "target": "db/b", "sleep": "0s", "approval": "required",
                        "approvers": ["carol"]},
                    {"name": "free", "target": "db/c", "sleep": "0s"},
                ]})),
                "alice".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        promote(s).await;
        let v = view(s, id).await;
        assert_eq!(cause(&v, "drop"), "waits for approval");
        assert_eq!(status(&v, "free"), TaskStatus::Available);
        // The Overview's strip counts them.
        assert_eq!(
            s.approvals_waiting(10).await.unwrap(),
            vec![(id, "p".to_owned(), 2)]
        );
        let drop = task_named(&v, "drop").id;
        let only = task_named(&v, "only").id;
        let free = task_named(&v, "free").id;
        forbidden(
            s.task_approve(drop, "alice".into(), Ts::now()).await,
            "two people",
        );
        forbidden(
            s.task_approve(only, "bob".into(), Ts::now()).await,
            "only carol",
        );
        conflict(
            s.task_approve(free, "bob".into(), Ts::now()).await,
            "does not require",
        );
        let before = s.event_list(0, 10_000).await.unwrap().len();
        assert_eq!(view(s, id).await, v, "refusals changed nothing");
        assert_eq!(s.event_list(0, 10_000).await.unwrap().len(), before);

        assert_eq!(
            s.task_approve(drop, "bob".into(), Ts::now()).await.unwrap(),
            (id, 1)
        );
        conflict(
            s.task_approve(drop, "carol".into(), Ts::now()).await,
            "already approved by bob",
        );
        // Read before the next round: the cause says it was approved.
        assert_eq!(
            cause(&view(s, id).await, "drop"),
            "approved by bob; waiting for the scheduler's next round"
        );
        promote(s).await;
        let v = view(s, id).await;
        assert_eq!(status(&v, "drop"), TaskStatus::Available);
        assert_eq!(task_named(&v, "drop").approved_by.as_deref(), Some("bob"));
        let run = s
            .run_get(task_named(&v, "drop").run_id.unwrap())
            .await
            .unwrap();
        assert!(
            run.events
                .iter()
                .any(|e| e.detail.as_deref() == Some("approved by bob") && e.actor == "bob")
        );
        // The plan-wide approval takes the rest, by someone allowed.
        forbidden(
            s.plan_approve(id, "bob".into(), Ts::now()).await,
            "only carol",
        );
        assert_eq!(
            s.plan_approve(id, "carol".into(), Ts::now()).await.unwrap(),
            1
        );
        conflict(
            s.plan_approve(id, "carol".into(), Ts::now()).await,
            "no task waiting",
        );
        assert_eq!(s.approvals_waiting(10).await.unwrap(), vec![]);
    }

    pub async fn a_stage_approval_releases_the_whole_stage(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let id = submit(
            s,
            json!({"name": "release",
            "stages": [{"name": "migrate"}, {"name": "deploy", "approval": "required"}],
            "tasks": [
                {"name": "m", "target": "db/a", "sleep": "0s", "stage": "migrate"},
                {"name": "d1", "target": "svc/a", "sleep": "0s", "stage": "deploy"},
                {"name": "d2", "target": "svc/b", "sleep": "0s", "stage": "deploy"},
            ]}),
        )
        .await;
        promote(s).await;
        let v = view(s, id).await;
        // Pre-approved while it still waits for the migration.
        let (_, approved) = s
            .task_approve(task_named(&v, "d1").id, "bob".into(), Ts::now())
            .await
            .unwrap();
        assert_eq!(approved, 2, "one approval takes the stage");
        run_to_end(s, id, &["m"], true).await;
        assert_eq!(promote(s).await.promoted, 2);
    }

    /// "A task's own approval wins over its stage's": approving the stage
    /// through another task must not approve a task whose own rule names
    /// other approvers or needs two people (a hostile trial did exactly
    /// that, as the plan's submitter and as someone off the list).
    pub async fn a_stage_approval_leaves_a_task_with_its_own_rule_to_that_rule(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let id = submit(
            s,
            json!({"name": "release",
            "stages": [{"name": "deploy", "approval": "required"}],
            "tasks": [
                {"name": "a", "target": "svc/a", "sleep": "0s", "stage": "deploy"},
                {"name": "b", "target": "svc/b", "sleep": "0s", "stage": "deploy"},
                {"name": "listed", "target": "svc/c", "sleep": "0s", "stage": "deploy",
                 "approval": "two-person", "approvers": ["carol"]},
                {"name": "two", "target": "svc/d", "sleep": "0s", "stage": "deploy",
                 "approval": "two-person"},
            ]}),
        )
        .await;
        promote(s).await;
        let v = view(s, id).await;
        let approved_by = |v: &PlanView, name: &str| task_named(v, name).approved_by.clone();
        // The submitter ("t") approves the stage: a and b only.
        let (_, approved) = s
            .task_approve(task_named(&v, "a").id, "t".into(), Ts::now())
            .await
            .unwrap();
        assert_eq!(approved, 2, "the stage's own tasks, not the stricter ones");
        let v = view(s, id).await;
        assert_eq!(approved_by(&v, "b").as_deref(), Some("t"));
        assert_eq!(approved_by(&v, "listed"), None);
        assert_eq!(approved_by(&v, "two"), None);
        forbidden(
            s.task_approve(task_named(&v, "two").id, "t".into(), Ts::now())
                .await,
            "needs two people",
        );
        forbidden(
            s.task_approve(task_named(&v, "listed").id, "bob".into(), Ts::now())
                .await,
            "only carol",
        );
        // Each stricter task is approved under its own rule, alone.
        let (_, approved) = s
            .task_approve(task_named(&v, "listed").id, "carol".into(), Ts::now())
            .await
            .unwrap();
        assert_eq!(approved, 1);
        let (_, approved) = s
            .task_approve(task_named(&v, "two").id, "bob".into(), Ts::now())
            .await
            .unwrap();
        assert_eq!(approved, 1);
        assert_eq!(promote(s).await.promoted, 4);
    }

    pub async fn a_paused_plan_or_target_promotes_nothing_until_resumed(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let id = submit(
            s,
            json!({"name": "p", "tasks": [
                {"name": "a", "target": "db/a", "sleep": "0s"},
                {"name": "b", "target": "db/b", "sleep": "0s"}]}),
        )
        .await;
        let other = submit(
            s,
            json!({"name": "q", "tasks": [{"name": "c", "target": "db/orders", "sleep": "0s"}]}),
        )
        .await;
        s.plan_pause(id, "alice".into(), Ts::now()).await.unwrap();
        conflict(
            s.plan_pause(id, "bob".into(), Ts::now()).await,
            "already paused by alice",
        );
        s.target_pause("db/orders", "bob".into(), Ts::now())
            .await
            .unwrap();
        conflict(
            s.target_pause("db/orders", "bob".into(), Ts::now()).await,
            "already paused",
        );
        assert_eq!(promote(s).await.promoted, 0);
        let v = view(s, id).await;
        assert!(
            cause(&v, "a").starts_with("plan paused by alice at "),
            "{}",
            cause(&v, "a")
        );
        assert_eq!(v.paused_by.as_deref(), Some("alice"));
        assert!(
            cause(&view(s, other).await, "c").starts_with("target db/orders paused by bob at "),
            "{}",
            cause(&view(s, other).await, "c")
        );
        let targets = s.target_list().await.unwrap();
        let orders = targets.iter().find(|t| t.target == "db/orders").unwrap();
        assert_eq!(
            (orders.paused_by.as_deref(), orders.waiting),
            (Some("bob"), 1)
        );

        s.plan_resume(id, "alice".into(), Ts::now()).await.unwrap();
        conflict(
            s.plan_resume(id, "alice".into(), Ts::now()).await,
            "not paused",
        );
        assert_eq!(promote(s).await.promoted, 2);
        s.target_resume("db/orders", "bob".into(), Ts::now())
            .await
            .unwrap();
        conflict(
            s.target_resume("db/orders", "bob".into(), Ts::now()).await,
            "not paused",
        );
        assert_eq!(promote(s).await.promoted, 1);
        assert!(matches!(
            s.plan_pause(999_999, "alice".into(), Ts::now()).await,
            Err(StoreError::NotFound { .. })
        ));
    }

    pub async fn capacity_caps_the_runs_holding_a_target(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        s.target_capacity_set("pool/gpu", Some(2), "ops".into(), Ts::now())
            .await
            .unwrap();
        assert!(matches!(
            s.target_capacity_set("pool/gpu", Some(0), "ops".into(), Ts::now())
                .await,
            Err(StoreError::Invalid(_))
        ));
        let tasks: Vec<_> = (0..4)
            .map(|i| {
                json!({"name": format!("j{i}"), "target": "pool/gpu", "exclusive": false,
                "sleep": "0s"})
            })
            .collect();
        let id = submit(s, json!({"name": "jobs", "tasks": tasks})).await;
        assert_eq!(promote(s).await.promoted, 2);
        let v = view(s, id).await;
        let (j0, j1) = (
            task_named(&v, "j0").run_id.unwrap(),
            task_named(&v, "j1").run_id.unwrap(),
        );
        assert_eq!(
            cause(&v, "j2"),
            format!("pool/gpu is at capacity 2/2 (runs #{j0}, #{j1})")
        );
        let gpu = s.target_list().await.unwrap();
        let gpu = gpu.iter().find(|t| t.target == "pool/gpu").unwrap();
        assert_eq!((gpu.capacity, gpu.holding, gpu.waiting), (Some(2), 2, 2));
        run_to_end(s, id, &["j0"], true).await;
        assert_eq!(promote(s).await.promoted, 1);
        // Raising it lets the last one start beside the others.
        s.target_capacity_set("pool/gpu", Some(3), "ops".into(), Ts::now())
            .await
            .unwrap();
        assert_eq!(promote(s).await.promoted, 1);
        s.target_capacity_set("pool/gpu", None, "ops".into(), Ts::now())
            .await
            .unwrap();
        assert_eq!(
            s.target_list()
                .await
                .unwrap()
                .iter()
                .find(|t| t.target == "pool/gpu")
                .unwrap()
                .capacity,
            None
        );
    }

    /// Found by the eight-replica history check: a run held by a
    /// dependency is not read by the promoter, so its version must still
    /// reach the version gate.
    pub async fn a_version_waiting_for_a_dependency_still_holds_larger_versions(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let first = submit(
            s,
            json!({"name": "a", "tasks": [
                {"name": "prep", "target": "x/prep", "sleep": "0s"},
                {"name": "v1", "target": "db/v", "version": "1", "sleep": "0s", "depends_on": ["prep"]},
            ]}),
        )
        .await;
        let later = submit(
            s,
            json!({"name": "b", "tasks": [{"name": "v2", "target": "db/v", "version": "2", "sleep": "0s"}]}),
        )
        .await;
        promote(s).await;
        let v1 = task_named(&view(s, first).await, "v1").run_id.unwrap();
        assert_eq!(
            cause(&view(s, later).await, "v2"),
            format!("waits for run #{v1} (version 1) on db/v")
        );
        assert_eq!(status(&view(s, later).await, "v2"), TaskStatus::Pending);
    }
}
