//! Plans on SQLite and PostgreSQL: submit (started or not, small or
//! large), the plan list and a plan's view, the operator's actions (start,
//! cancel, retry, skip) and what they refuse, and not-found answers.

use std::collections::HashSet;
use std::time::Duration;

use baton::store::{LogLine, StoreError};
use domain::gates::CAUSE_NEW;
use domain::gates::NodeLabels;
use domain::model::{PlanStatus, RunStatus, TaskStatus};
use domain::time::Ts;
use serde_json::json;

use crate::common::store::{claim, done, failed, promote, promote_and_claim, task_named};
use crate::common::{Kind, TestDb, plan};
use crate::per_backend;

per_backend!(cases:
    submit_creates_pending_runs_with_a_cause,
    submit_without_start_waits_for_run,
    a_large_submit_keeps_every_task_and_its_run,
    plan_list_filters_and_pages,
    cancel_works_in_every_live_status,
    operator_retry_and_skip,
    missing_things_are_not_found,
);

mod cases {
    use super::*;

    pub async fn submit_creates_pending_runs_with_a_cause(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let id = s
            .plan_insert(
                &plan(json!({"name": "p", "description": "d", "parallel_limit": 3, "tasks": [
                    {"name": "a", "target": "db/a", "version": "1", "sleep": "0s"},
                    {"name": "b", "target": "db/b", "exclusive": false, "node": "gpu", "command": {"argv": ["true"]}},
                ]})),
                "alice".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        let view = s.plan_get(id).await.unwrap();
        assert_eq!((view.name.as_str(), view.description.as_str()), ("p", "d"));
        assert_eq!(view.parallel_limit, Some(3));
        assert_eq!(view.created_by, "alice");
        assert_eq!(view.status, PlanStatus::Running);
        assert_eq!(view.tasks.len(), 2);
        for t in &view.tasks {
            assert_eq!(t.status, TaskStatus::Pending);
            assert_eq!(t.attempt, Some(1));
            assert_eq!(t.waiting_cause.as_deref(), Some(CAUSE_NEW));
        }
        let b = task_named(&view, "b");
        assert!(!b.exclusive);
        assert_eq!(b.node.as_deref(), Some("gpu"));
        let run = s.run_get(b.run_id.unwrap()).await.unwrap();
        assert_eq!(run.events.len(), 1);
        assert_eq!(
            (run.events[0].from, run.events[0].to),
            (None, RunStatus::Pending)
        );
        assert_eq!(run.events[0].actor, "alice");

        // A later plan's tasks each point at a run of their own (their first
        // runs' ids are reserved at insert, after every run already there,
        // including a retry's).
        let a = task_named(&view, "a");
        s.task_cancel(a.id, "alice".into(), Ts::now())
            .await
            .unwrap();
        s.task_retry(a.id, "alice".into(), Ts::now()).await.unwrap();
        let later = s
            .plan_insert(
                &plan(json!({"name": "q", "tasks": [
                    {"name": "c", "target": "db/c", "sleep": "0s"},
                    {"name": "d", "target": "db/d", "sleep": "0s"},
                ]})),
                "alice".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        let mut seen = HashSet::new();
        for t in s.plan_get(later).await.unwrap().tasks {
            let run = s.run_get(t.run_id.unwrap()).await.unwrap();
            assert_eq!((run.task_id, run.attempt), (t.id, 1), "task {}", t.name);
            assert_eq!(run.status, RunStatus::Pending);
            assert!(seen.insert(run.id));
        }
        let a = task_named(&s.plan_get(id).await.unwrap(), "a").clone();
        let retried = s.run_get(a.run_id.unwrap()).await.unwrap();
        assert_eq!((retried.task_id, retried.attempt), (a.id, 2));
        assert!(!seen.contains(&retried.id));
    }

    pub async fn submit_without_start_waits_for_run(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let id = s
            .plan_insert(&plan(json!({"name": "p", "start": false, "tasks": [{"name": "a", "target": "t", "sleep": "0s"}]})), "alice".into(), Ts::now())
            .await
            .unwrap();
        let view = s.plan_get(id).await.unwrap();
        assert_eq!(view.status, PlanStatus::NotStarted);
        assert_eq!(view.tasks[0].status, TaskStatus::NotStarted);
        assert_eq!(view.tasks[0].run_id, None);
        assert!(promote(s.as_ref()).await.promoted == 0);
        s.plan_start(id, "bob".into(), Ts::now()).await.unwrap();
        let view = s.plan_get(id).await.unwrap();
        assert_eq!(view.tasks[0].status, TaskStatus::Pending);
        let run = s.run_get(view.tasks[0].run_id.unwrap()).await.unwrap();
        assert_eq!(run.events[0].actor, "bob");
        assert!(matches!(
            s.plan_start(id, "bob".into(), Ts::now()).await,
            Err(StoreError::Conflict(_))
        ));
    }

    /// 203 tasks: more than one batch of rows on every backend (SQLite
    /// inserts them in chunks of 64, 8, 2 and 1), each with its own
    /// fields, and each first run copied from its own task.
    pub async fn a_large_submit_keeps_every_task_and_its_run(kind: Kind) {
        const TASKS: usize = 203;
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let tasks: Vec<_> = (0..TASKS)
            .map(|i| {
                let mut t = json!({
                    "name": format!("t{i:03}"),
                    "target": format!("db/{}", i % 17),
                    "exclusive": i % 2 == 0,
                    "timeout": format!("{}s", 10 + i),
                    "sleep": format!("{}ms", i),
                });
                if i % 3 == 0 {
                    t["version"] = format!("1.{i}").into();
                }
                if i % 5 == 0 {
                    t["node"] = "gpu".into();
                }
                t
            })
            .collect();
        let id = s
            .plan_insert(
                &plan(json!({"name": "big", "tasks": tasks})),
                "alice".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        let view = s.plan_get(id).await.unwrap();
        assert_eq!(view.tasks.len(), TASKS);
        let mut runs = HashSet::new();
        for (i, t) in view.tasks.iter().enumerate() {
            assert_eq!(t.name, format!("t{i:03}"));
            assert_eq!(t.target, format!("db/{}", i % 17));
            assert_eq!(t.exclusive, i % 2 == 0, "{}", t.name);
            assert_eq!(t.version, (i % 3 == 0).then(|| format!("1.{i}")));
            assert_eq!(t.node.as_deref(), (i % 5 == 0).then_some("gpu"));
            assert_eq!((t.status, t.attempt), (TaskStatus::Pending, Some(1)));
            let run = s.run_get(t.run_id.unwrap()).await.unwrap();
            assert_eq!((run.task_id, run.plan_id, run.attempt), (t.id, id, 1));
            assert_eq!(run.target, t.target);
            assert_eq!(run.events.len(), 1, "{}", t.name);
            assert_eq!(run.events[0].detail.as_deref(), Some("submitted"));
            assert!(runs.insert(run.id));
        }
        // The executor and timeout reach the claimer from the task row.
        let labels = vec!["gpu".to_owned()];
        let mut nodes = NodeLabels::default();
        nodes.live.insert("gpu".to_owned());
        let mut claimed = Vec::new();
        while claimed.len() < TASKS {
            s.run_promote_round(&nodes, None, Ts::now()).await.unwrap();
            let batch = s
                .run_claim_many(&claim("r-test", &labels, 1000), Ts::now())
                .await
                .unwrap();
            assert!(!batch.is_empty(), "{} of {TASKS} claimed", claimed.len());
            let finishes: Vec<_> = batch.iter().map(|c| done(c.id)).collect();
            s.run_finish_many("r-test", &finishes, Ts::now())
                .await
                .unwrap();
            claimed.extend(batch);
        }
        for c in claimed {
            let i = view.tasks.iter().position(|t| t.id == c.task_id).unwrap();
            assert_eq!(c.executor["kind"], "sleep");
            assert_eq!(c.executor["duration"], i as u64, "milliseconds");
            let timeout = (c.deadline.0 - c.started_at.0).num_seconds();
            assert_eq!(timeout, 10 + i as i64, "t{i:03}");
        }
    }

    pub async fn plan_list_filters_and_pages(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let one = |name: &str, start: bool| {
            plan(
                json!({"name": name, "start": start, "tasks": [{"name": "a", "target": name, "sleep": "0s"}, {"name": "b", "target": name, "sleep": "0s"}]}),
            )
        };
        let not_started = s
            .plan_insert(&one("ns", false), "t".into(), Ts::now())
            .await
            .unwrap();
        let running = s
            .plan_insert(&one("run", true), "t".into(), Ts::now())
            .await
            .unwrap();
        let finished = s
            .plan_insert(&one("fin", true), "t".into(), Ts::now())
            .await
            .unwrap();
        let fin = s.plan_get(finished).await.unwrap();
        for t in &fin.tasks {
            s.task_cancel(t.id, "t".into(), Ts::now()).await.unwrap();
            s.task_skip(t.id, "t".into(), Ts::now()).await.unwrap();
        }
        let all = s.plan_list(None, None, 10, 0).await.unwrap();
        assert_eq!(all.total, 3);
        assert_eq!(
            all.plans.iter().map(|p| p.id).collect::<Vec<_>>(),
            vec![finished, running, not_started]
        );
        for summary in &all.plans {
            let view = s.plan_get(summary.id).await.unwrap();
            assert_eq!(
                summary.status, view.status,
                "SQL and Rust agree on plan {}",
                view.name
            );
            assert_eq!(summary.counts.values().sum::<i64>(), 2);
        }
        assert_eq!(all.plans[0].status, PlanStatus::Done);
        assert_eq!(all.plans[0].counts.get(&TaskStatus::Skipped), Some(&2));
        assert_eq!(all.plans[1].counts.get(&TaskStatus::Pending), Some(&2));
        assert_eq!(all.plans[2].status, PlanStatus::NotStarted);
        let page = s.plan_list(None, None, 1, 1).await.unwrap();
        assert_eq!((page.total, page.plans[0].id), (3, running));
        let past_end = s.plan_list(None, None, 10, 10).await.unwrap();
        assert_eq!((past_end.total, past_end.plans.len()), (3, 0));
        let only = s
            .plan_list(Some(PlanStatus::NotStarted), None, 10, 0)
            .await
            .unwrap();
        assert_eq!((only.total, only.plans[0].id), (1, not_started));
        assert_eq!(
            s.plan_list(Some(PlanStatus::Failed), None, 10, 0)
                .await
                .unwrap()
                .total,
            0
        );
    }

    pub async fn cancel_works_in_every_live_status(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let id = s
            .plan_insert(
                &plan(json!({"name": "p", "tasks": [
                    {"name": "running", "target": "a", "sleep": "0s"},
                    {"name": "available", "target": "b", "sleep": "0s"},
                    {"name": "pending", "target": "a", "sleep": "0s"},
                ]})),
                "t".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        promote(s.as_ref()).await;
        let claimed = s
            .run_claim_many(&claim("r-test", &[], 1), Ts::now())
            .await
            .unwrap();
        let view = s.plan_get(id).await.unwrap();
        let running = task_named(&view, "running");
        assert_eq!(claimed[0].id, running.run_id.unwrap());
        // Runs not executing end CANCELED at once.
        for name in ["pending", "available"] {
            let task = task_named(&view, name);
            s.task_cancel(task.id, "carol".into(), Ts::now())
                .await
                .unwrap();
            let run = s.run_get(task.run_id.unwrap()).await.unwrap();
            assert_eq!(run.status, RunStatus::Canceled, "{name}");
            assert_eq!(run.error.as_deref(), Some("canceled by carol"));
            let last = run.events.last().unwrap();
            assert_eq!(last.actor, "carol");
            assert_eq!(last.to, RunStatus::Canceled);
            assert!(matches!(
                s.task_cancel(task.id, "carol".into(), Ts::now()).await,
                Err(StoreError::Conflict(_))
            ));
            assert_eq!(s.run_log(run.id).await.unwrap(), "");
        }
        // A RUNNING one ends when its replica confirms the kill (`cancel`).
        s.task_cancel(running.id, "carol".into(), Ts::now())
            .await
            .unwrap();
        let run = claimed[0].id;
        assert_eq!(
            s.run_finish_many("r-test", &[failed(run)], Ts::now())
                .await
                .unwrap()
                .finished,
            vec![run]
        );
        assert_eq!(s.run_get(run).await.unwrap().status, RunStatus::Canceled);
        // The replica that ran it is fenced out everywhere now.
        assert!(
            s.run_heartbeat_many("r-test", &[(run, Duration::from_secs(10))], Ts::now())
                .await
                .unwrap()
                .owned
                .is_empty()
        );
        let line = LogLine {
            at: Ts::now(),
            stream: "stdout",
            line: "late".into(),
        };
        assert!(!s.run_log_append("r-test", run, &[line]).await.unwrap());
        assert_eq!(
            s.run_finish_many("r-test", &[done(run)], Ts::now())
                .await
                .unwrap()
                .fenced,
            vec![run]
        );
        assert_eq!(s.plan_get(id).await.unwrap().status, PlanStatus::Canceled);
        assert!(matches!(
            s.plan_cancel(id, "carol".into(), Ts::now()).await,
            Err(StoreError::Conflict(_))
        ));
    }

    pub async fn operator_retry_and_skip(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let id = s
            .plan_insert(
                &plan(json!({"name": "p", "tasks": [
                    {"name": "a", "target": "a", "sleep": "0s"},
                    {"name": "b", "target": "b", "sleep": "0s"},
                    {"name": "c", "target": "c", "sleep": "0s"},
                ]})),
                "t".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        let runs = promote_and_claim(s.as_ref()).await;
        s.run_finish_many(
            "r-test",
            &[failed(runs[0]), failed(runs[1]), done(runs[2])],
            Ts::now(),
        )
        .await
        .unwrap();
        let view = s.plan_get(id).await.unwrap();
        assert_eq!(view.status, PlanStatus::Failed);
        let (a, b, c) = (
            task_named(&view, "a").id,
            task_named(&view, "b").id,
            task_named(&view, "c").id,
        );
        assert!(
            matches!(
                s.task_retry(c, "dan".into(), Ts::now()).await,
                Err(StoreError::Conflict(_))
            ),
            "DONE cannot be retried"
        );
        assert!(
            matches!(
                s.task_skip(c, "dan".into(), Ts::now()).await,
                Err(StoreError::Conflict(_))
            ),
            "DONE cannot be skipped"
        );
        assert_eq!(s.task_retry(a, "dan".into(), Ts::now()).await.unwrap(), id);
        let view = s.plan_get(id).await.unwrap();
        assert_eq!(task_named(&view, "a").attempt, Some(2));
        assert_eq!(task_named(&view, "a").status, TaskStatus::Pending);
        assert_eq!(view.status, PlanStatus::Running);
        assert!(
            matches!(
                s.task_skip(a, "dan".into(), Ts::now()).await,
                Err(StoreError::Conflict(_))
            ),
            "PENDING cannot be skipped"
        );
        s.task_skip(b, "dan".into(), Ts::now()).await.unwrap();
        assert_eq!(
            s.plan_get(id)
                .await
                .unwrap()
                .tasks
                .iter()
                .find(|t| t.id == b)
                .unwrap()
                .status,
            TaskStatus::Skipped
        );
        assert!(
            matches!(
                s.task_retry(b, "dan".into(), Ts::now()).await,
                Err(StoreError::Conflict(_))
            ),
            "SKIPPED cannot be retried"
        );
        let runs = promote_and_claim(s.as_ref()).await;
        s.run_finish_many("r-test", &[failed(runs[0])], Ts::now())
            .await
            .unwrap();
        s.plan_retry(id, "erin".into(), Ts::now()).await.unwrap();
        assert!(matches!(
            s.plan_retry(id, "erin".into(), Ts::now()).await,
            Err(StoreError::Conflict(_))
        ));
        let view = s.plan_get(id).await.unwrap();
        let a = task_named(&view, "a");
        assert_eq!(a.attempt, Some(3));
        let run = s.run_get(a.run_id.unwrap()).await.unwrap();
        assert_eq!(run.events[0].actor, "erin");
        let runs = promote_and_claim(s.as_ref()).await;
        s.run_finish_many("r-test", &[done(runs[0])], Ts::now())
            .await
            .unwrap();
        assert_eq!(
            s.plan_get(id).await.unwrap().status,
            PlanStatus::Done,
            "DONE and SKIPPED complete a plan"
        );
    }

    pub async fn missing_things_are_not_found(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let nf = |r: Result<_, StoreError>| matches!(r, Err(StoreError::NotFound { .. }));
        assert!(nf(s.plan_get(42).await.map(|_| ())));
        assert!(nf(s.plan_start(42, "t".into(), Ts::now()).await));
        assert!(nf(s.plan_retry(42, "t".into(), Ts::now()).await));
        assert!(nf(s.plan_cancel(42, "t".into(), Ts::now()).await));
        assert!(nf(s
            .task_retry(42, "t".into(), Ts::now())
            .await
            .map(|_| ())));
        assert!(nf(s
            .task_cancel(42, "t".into(), Ts::now())
            .await
            .map(|_| ())));
        assert!(nf(s.task_skip(42, "t".into(), Ts::now()).await.map(|_| ())));
        assert!(nf(s.run_get(42).await.map(|_| ())));
        assert!(nf(s.run_log(42).await.map(|_| ())));
        s.ready().await.expect("a migrated database is ready");
    }
}
