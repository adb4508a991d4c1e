//! The store conformance suite: every store operation, run once against
//! SQLite and once against PostgreSQL (`sqlite::*`, `postgres::*`). This is
//! what proves the two backends behave the same.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use app::model::{PlanStatus, RunStatus, TaskStatus};
use baton::store::gates::CAUSE_NEW;
use baton::store::{LogLine, NodeLabels, Session, Store, StoreError, Ts};
use common::store::{
    claim, done, failed, noop_tasks, promote, promote_and_claim, replica, task_named,
};
use common::{Kind, TestDb, plan};
use serde_json::json;

per_backend!(cases:
    submit_creates_pending_runs_with_a_cause,
    submit_without_start_waits_for_run,
    a_large_submit_keeps_every_task_and_its_run,
    exclusive_runs_share_no_target,
    versions_go_in_natural_order,
    plan_limit_caps_active_runs,
    run_at_and_node_gates_explain_themselves,
    claim_takes_up_to_the_limit_and_honours_labels,
    finish_is_fenced_and_recorded,
    failed_runs_retry_with_backoff_until_attempts_run_out,
    cancel_works_in_every_live_status,
    operator_retry_and_skip,
    plan_list_filters_and_pages,
    logs_are_fenced_and_ordered,
    replicas_are_listed_with_their_running_count,
    missing_things_are_not_found,
    concurrent_claimers_never_share_a_run,
    concurrent_promoters_respect_the_gates,
    racing_retries_create_one_attempt_each,
    sessions_last_until_they_expire_or_end,
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
                "alice",
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
        s.task_cancel(a.id, "alice", Ts::now()).await.unwrap();
        s.task_retry(a.id, "alice", Ts::now()).await.unwrap();
        let later = s
            .plan_insert(
                &plan(json!({"name": "q", "tasks": [
                    {"name": "c", "target": "db/c", "sleep": "0s"},
                    {"name": "d", "target": "db/d", "sleep": "0s"},
                ]})),
                "alice",
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
            .plan_insert(&plan(json!({"name": "p", "start": false, "tasks": [{"name": "a", "target": "t", "sleep": "0s"}]})), "alice", Ts::now())
            .await
            .unwrap();
        let view = s.plan_get(id).await.unwrap();
        assert_eq!(view.status, PlanStatus::NotStarted);
        assert_eq!(view.tasks[0].status, TaskStatus::NotStarted);
        assert_eq!(view.tasks[0].run_id, None);
        assert!(promote(s.as_ref()).await.promoted == 0);
        s.plan_start(id, "bob", Ts::now()).await.unwrap();
        let view = s.plan_get(id).await.unwrap();
        assert_eq!(view.tasks[0].status, TaskStatus::Pending);
        let run = s.run_get(view.tasks[0].run_id.unwrap()).await.unwrap();
        assert_eq!(run.events[0].actor, "bob");
        assert!(matches!(
            s.plan_start(id, "bob", Ts::now()).await,
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
                "alice",
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
            s.run_promote_round(&nodes, Ts::now()).await.unwrap();
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

    pub async fn exclusive_runs_share_no_target(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let id = s
            .plan_insert(
                &plan(json!({"name": "p", "tasks": [
                    {"name": "x1", "target": "db/a", "sleep": "0s"},
                    {"name": "x2", "target": "db/a", "sleep": "0s"},
                    {"name": "s1", "target": "db/b", "exclusive": false, "sleep": "0s"},
                    {"name": "s2", "target": "db/b", "exclusive": false, "sleep": "0s"},
                    {"name": "x3", "target": "db/b", "sleep": "0s"},
                ]})),
                "t",
                Ts::now(),
            )
            .await
            .unwrap();
        let report = promote(s.as_ref()).await;
        assert_eq!((report.promoted, report.waiting), (3, 2));
        let view = s.plan_get(id).await.unwrap();
        let x1 = task_named(&view, "x1");
        assert_eq!(x1.status, TaskStatus::Available);
        assert_eq!(x1.waiting_cause, None);
        assert_eq!(task_named(&view, "s1").status, TaskStatus::Available);
        assert_eq!(task_named(&view, "s2").status, TaskStatus::Available);
        let x2 = task_named(&view, "x2");
        assert_eq!(x2.status, TaskStatus::Pending);
        assert_eq!(
            x2.waiting_cause.as_deref(),
            Some(format!("db/a is busy with run #{}", x1.run_id.unwrap()).as_str())
        );
        assert!(
            task_named(&view, "x3")
                .waiting_cause
                .as_deref()
                .unwrap()
                .starts_with("db/b is busy with run #")
        );
        // Finishing x1 frees db/a for x2.
        let claimed = s
            .run_claim_many(&claim("r-test", &[], 10), Ts::now())
            .await
            .unwrap();
        assert_eq!(claimed.len(), 3);
        s.run_finish_many("r-test", &[done(x1.run_id.unwrap())], Ts::now())
            .await
            .unwrap();
        promote(s.as_ref()).await;
        let view = s.plan_get(id).await.unwrap();
        assert_eq!(task_named(&view, "x2").status, TaskStatus::Available);
        assert_eq!(task_named(&view, "x3").status, TaskStatus::Pending);
    }

    pub async fn versions_go_in_natural_order(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let later = s
            .plan_insert(&plan(json!({"name": "later", "tasks": [{"name": "v10", "target": "db/a", "exclusive": false, "version": "1.10", "sleep": "0s"}]})), "t", Ts::now())
            .await
            .unwrap();
        let earlier = s
            .plan_insert(&plan(json!({"name": "earlier", "tasks": [{"name": "v9", "target": "db/a", "exclusive": false, "version": "1.9", "sleep": "0s"}]})), "t", Ts::now())
            .await
            .unwrap();
        promote(s.as_ref()).await;
        let v9 = s.plan_get(earlier).await.unwrap().tasks[0].clone();
        let v10 = s.plan_get(later).await.unwrap().tasks[0].clone();
        assert_eq!(v9.status, TaskStatus::Available);
        assert_eq!(v10.status, TaskStatus::Pending);
        assert_eq!(
            v10.waiting_cause.as_deref(),
            Some(
                format!(
                    "waits for run #{} (version 1.9) on db/a",
                    v9.run_id.unwrap()
                )
                .as_str()
            )
        );
        s.run_claim_many(&claim("r-test", &[], 10), Ts::now())
            .await
            .unwrap();
        s.run_finish_many("r-test", &[done(v9.run_id.unwrap())], Ts::now())
            .await
            .unwrap();
        promote(s.as_ref()).await;
        assert_eq!(
            s.plan_get(later).await.unwrap().tasks[0].status,
            TaskStatus::Available
        );
    }

    pub async fn plan_limit_caps_active_runs(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let tasks = noop_tasks(5);
        let id = s
            .plan_insert(
                &plan(json!({"name": "p", "parallel_limit": 2, "tasks": tasks})),
                "t",
                Ts::now(),
            )
            .await
            .unwrap();
        let report = promote(s.as_ref()).await;
        assert_eq!(report.promoted, 2);
        let view = s.plan_get(id).await.unwrap();
        let waiting: Vec<_> = view
            .tasks
            .iter()
            .filter(|t| t.status == TaskStatus::Pending)
            .collect();
        assert_eq!(waiting.len(), 3);
        assert!(
            waiting
                .iter()
                .all(|t| t.waiting_cause.as_deref() == Some("plan limit 2 reached"))
        );
        // A second round changes nothing while the two still hold slots.
        assert_eq!(promote(s.as_ref()).await.promoted, 0);
    }

    pub async fn run_at_and_node_gates_explain_themselves(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let at = chrono::Utc::now() + chrono::TimeDelta::seconds(3600);
        let id = s
            .plan_insert(
                &plan(json!({"name": "p", "tasks": [
                    {"name": "later", "target": "a", "run_at": at.to_rfc3339(), "sleep": "0s"},
                    {"name": "gpu", "target": "b", "node": "gpu", "sleep": "0s"},
                ]})),
                "t",
                Ts::now(),
            )
            .await
            .unwrap();
        promote(s.as_ref()).await;
        let view = s.plan_get(id).await.unwrap();
        assert!(
            task_named(&view, "later")
                .waiting_cause
                .as_deref()
                .unwrap()
                .starts_with("scheduled for ")
        );
        assert_eq!(
            task_named(&view, "gpu").waiting_cause.as_deref(),
            Some("no live replica labelled gpu (never seen); runs on any replica in 4 min")
        );
        // Time passes, a gpu replica shows up: both go.
        let mut nodes = NodeLabels::default();
        nodes.live.insert("gpu".into());
        let report = s
            .run_promote_round(&nodes, Ts::from(at + chrono::TimeDelta::seconds(1)))
            .await
            .unwrap();
        assert_eq!(report.promoted, 2);
    }

    pub async fn claim_takes_up_to_the_limit_and_honours_labels(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let mut tasks: Vec<_> = (0..5).map(|i| json!({"name": format!("t{i}"), "target": format!("x{i}"), "timeout": "5m", "sleep": "0s"})).collect();
        tasks.push(json!({"name": "pinned", "target": "y", "node": "gpu", "sleep": "0s"}));
        let id = s
            .plan_insert(&plan(json!({"name": "p", "tasks": tasks})), "t", Ts::now())
            .await
            .unwrap();
        let mut nodes = NodeLabels::default();
        nodes.live.insert("gpu".into());
        assert_eq!(
            s.run_promote_round(&nodes, Ts::now())
                .await
                .unwrap()
                .promoted,
            6
        );
        let now = Ts::now();
        let first = s
            .run_claim_many(&claim("r-one", &[], 3), now)
            .await
            .unwrap();
        assert_eq!(first.len(), 3);
        for c in &first {
            assert_eq!(c.started_at, now);
            assert_eq!(c.deadline, now.plus(Duration::from_secs(300)));
            assert_eq!(c.executor["kind"], "sleep");
        }
        let rest = s
            .run_claim_many(&claim("r-two", &[], 10), Ts::now())
            .await
            .unwrap();
        assert_eq!(rest.len(), 2, "the pinned run waits for a gpu replica");
        let gpu = vec!["gpu".to_string()];
        let pinned = s
            .run_claim_many(&claim("r-gpu", &gpu, 10), Ts::now())
            .await
            .unwrap();
        assert_eq!(pinned.len(), 1);
        let view = s.plan_get(id).await.unwrap();
        assert_eq!(
            task_named(&view, "pinned").replica_id.as_deref(),
            Some("r-gpu")
        );
        assert!(
            view.tasks
                .iter()
                .all(|t| t.status == TaskStatus::Running && t.started_at.is_some())
        );
        let run = s.run_get(first[0].id).await.unwrap();
        assert_eq!(run.replica_id.as_deref(), Some("r-one"));
        assert!(run.heartbeat_deadline.is_some());
        let last = run.events.last().unwrap();
        assert_eq!(
            (last.from, last.to, last.replica_id.as_deref()),
            (
                Some(RunStatus::Available),
                RunStatus::Running,
                Some("r-one")
            )
        );
    }

    pub async fn finish_is_fenced_and_recorded(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let id = s
            .plan_insert(
                &plan(json!({"name": "p", "tasks": [{"name": "a", "target": "x", "sleep": "0s"}]})),
                "t",
                Ts::now(),
            )
            .await
            .unwrap();
        let runs = promote_and_claim(s.as_ref()).await;
        let report = s
            .run_finish_many("r-other", &[done(runs[0])], Ts::now())
            .await
            .unwrap();
        assert_eq!(report.fenced, runs, "another replica cannot finish my run");
        let report = s
            .run_finish_many("r-test", &[done(runs[0])], Ts::now())
            .await
            .unwrap();
        assert_eq!(report.finished, runs);
        let again = s
            .run_finish_many("r-test", &[failed(runs[0])], Ts::now())
            .await
            .unwrap();
        assert_eq!(again.fenced, runs, "a finished run cannot finish twice");
        let view = s.plan_get(id).await.unwrap();
        assert_eq!(view.status, PlanStatus::Done);
        assert!(view.tasks[0].finished_at.is_some());
        let run = s.run_get(runs[0]).await.unwrap();
        assert_eq!(run.result_code, Some(0));
        let path: Vec<_> = run.events.iter().map(|e| e.to).collect();
        assert_eq!(
            path,
            [
                RunStatus::Pending,
                RunStatus::Available,
                RunStatus::Running,
                RunStatus::Done
            ]
        );
    }

    pub async fn failed_runs_retry_with_backoff_until_attempts_run_out(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let id = s.plan_insert(&plan(json!({"name": "p", "tasks": [{"name": "a", "target": "x", "max_attempts": 2, "sleep": "0s"}]})), "t", Ts::now()).await.unwrap();
        let runs = promote_and_claim(s.as_ref()).await;
        let now = Ts::now();
        let report = s
            .run_finish_many("r-test", &[failed(runs[0])], now)
            .await
            .unwrap();
        assert_eq!(report.retried.len(), 1);
        let view = s.plan_get(id).await.unwrap();
        assert_eq!(
            view.tasks[0].status,
            TaskStatus::Pending,
            "an attempt retried automatically is not a failure yet"
        );
        assert_eq!(view.tasks[0].attempt, Some(2));
        let retry = s.run_get(report.retried[0]).await.unwrap();
        assert_eq!(
            retry.run_at.map(Ts::from),
            Some(now.plus(Duration::from_secs(1)))
        );
        assert_eq!(retry.events[0].actor, "scheduler");
        // Not before its backoff is over.
        promote(s.as_ref()).await;
        assert!(
            s.plan_get(id).await.unwrap().tasks[0]
                .waiting_cause
                .as_deref()
                .unwrap()
                .starts_with("scheduled for")
        );
        s.run_promote_round(&NodeLabels::default(), now.plus(Duration::from_secs(2)))
            .await
            .unwrap();
        let second = s
            .run_claim_many(&claim("r-test", &[], 10), Ts::now())
            .await
            .unwrap();
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].attempt, 2);
        let report = s
            .run_finish_many("r-test", &[failed(second[0].id)], Ts::now())
            .await
            .unwrap();
        assert!(report.retried.is_empty());
        let view = s.plan_get(id).await.unwrap();
        assert_eq!(view.tasks[0].status, TaskStatus::Failed);
        assert_eq!(view.tasks[0].error.as_deref(), Some("exited with code 3"));
        assert_eq!(view.status, PlanStatus::Failed);
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
                "t",
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
        for name in ["pending", "available", "running"] {
            let task = task_named(&view, name);
            s.task_cancel(task.id, "carol", Ts::now()).await.unwrap();
            let run = s.run_get(task.run_id.unwrap()).await.unwrap();
            assert_eq!(run.status, RunStatus::Canceled, "{name}");
            let last = run.events.last().unwrap();
            assert_eq!(last.actor, "carol");
            assert_eq!(last.to, RunStatus::Canceled);
            assert!(matches!(
                s.task_cancel(task.id, "carol", Ts::now()).await,
                Err(StoreError::Conflict(_))
            ));
        }
        // The replica that ran it is fenced out everywhere.
        let run = claimed[0].id;
        assert!(
            s.run_heartbeat_many("r-test", &[(run, Duration::from_secs(10))], Ts::now())
                .await
                .unwrap()
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
        assert_eq!(s.run_log(run).await.unwrap(), "");
        assert_eq!(s.plan_get(id).await.unwrap().status, PlanStatus::Canceled);
        assert!(matches!(
            s.plan_cancel(id, "carol", Ts::now()).await,
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
                "t",
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
                s.task_retry(c, "dan", Ts::now()).await,
                Err(StoreError::Conflict(_))
            ),
            "DONE cannot be retried"
        );
        assert!(
            matches!(
                s.task_skip(c, "dan", Ts::now()).await,
                Err(StoreError::Conflict(_))
            ),
            "DONE cannot be skipped"
        );
        assert_eq!(s.task_retry(a, "dan", Ts::now()).await.unwrap(), id);
        let view = s.plan_get(id).await.unwrap();
        assert_eq!(task_named(&view, "a").attempt, Some(2));
        assert_eq!(task_named(&view, "a").status, TaskStatus::Pending);
        assert_eq!(view.status, PlanStatus::Running);
        assert!(
            matches!(
                s.task_skip(a, "dan", Ts::now()).await,
                Err(StoreError::Conflict(_))
            ),
            "PENDING cannot be skipped"
        );
        s.task_skip(b, "dan", Ts::now()).await.unwrap();
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
                s.task_retry(b, "dan", Ts::now()).await,
                Err(StoreError::Conflict(_))
            ),
            "SKIPPED cannot be retried"
        );
        let runs = promote_and_claim(s.as_ref()).await;
        s.run_finish_many("r-test", &[failed(runs[0])], Ts::now())
            .await
            .unwrap();
        s.plan_retry(id, "erin", Ts::now()).await.unwrap();
        assert!(matches!(
            s.plan_retry(id, "erin", Ts::now()).await,
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

    pub async fn plan_list_filters_and_pages(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let one = |name: &str, start: bool| {
            plan(
                json!({"name": name, "start": start, "tasks": [{"name": "a", "target": name, "sleep": "0s"}, {"name": "b", "target": name, "sleep": "0s"}]}),
            )
        };
        let not_started = s
            .plan_insert(&one("ns", false), "t", Ts::now())
            .await
            .unwrap();
        let running = s
            .plan_insert(&one("run", true), "t", Ts::now())
            .await
            .unwrap();
        let finished = s
            .plan_insert(&one("fin", true), "t", Ts::now())
            .await
            .unwrap();
        let fin = s.plan_get(finished).await.unwrap();
        for t in &fin.tasks {
            s.task_cancel(t.id, "t", Ts::now()).await.unwrap();
            s.task_skip(t.id, "t", Ts::now()).await.unwrap();
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

    pub async fn logs_are_fenced_and_ordered(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        s.plan_insert(
            &plan(json!({"name": "p", "tasks": [{"name": "a", "target": "x", "sleep": "0s"}]})),
            "t",
            Ts::now(),
        )
        .await
        .unwrap();
        let run = promote_and_claim(s.as_ref()).await[0];
        let lines: Vec<_> = (0..300)
            .map(|i| LogLine {
                at: Ts::now(),
                stream: if i % 100 == 99 { "stderr" } else { "stdout" },
                line: format!("line {i}"),
            })
            .collect();
        assert!(
            s.run_log_append("r-test", run, &lines[..150])
                .await
                .unwrap()
        );
        assert!(
            s.run_log_append("r-test", run, &lines[150..])
                .await
                .unwrap()
        );
        assert!(!s.run_log_append("r-other", run, &lines[..1]).await.unwrap());
        let text = s.run_log(run).await.unwrap();
        let got: Vec<&str> = text.lines().collect();
        assert_eq!(got.len(), 300);
        assert_eq!(got[0], "line 0");
        assert_eq!(got[99], "[stderr] line 99");
        assert_eq!(got[299], "[stderr] line 299");
    }

    pub async fn replicas_are_listed_with_their_running_count(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = Ts::now();
        s.replica_upsert(&replica("r-test", &["gpu", "eu"]), t0)
            .await
            .unwrap();
        s.replica_upsert(&replica("r-idle", &[]), t0).await.unwrap();
        let later = t0.plus(Duration::from_secs(5));
        s.replica_upsert(&replica("r-test", &["gpu", "eu"]), later)
            .await
            .unwrap();
        s.plan_insert(&plan(json!({"name": "p", "tasks": [{"name": "a", "target": "x", "sleep": "0s"}, {"name": "b", "target": "y", "sleep": "0s"}]})), "t", Ts::now()).await.unwrap();
        promote_and_claim(s.as_ref()).await;
        let list = s.replica_list().await.unwrap();
        assert_eq!(list.len(), 2);
        let me = list.iter().find(|r| r.info.replica_id == "r-test").unwrap();
        assert_eq!(me.info.labels, vec!["gpu", "eu"]);
        assert_eq!(me.last_heartbeat, later);
        assert_eq!(me.running, 2);
        s.replica_delete("r-idle").await.unwrap();
        assert_eq!(s.replica_list().await.unwrap().len(), 1);
    }

    pub async fn missing_things_are_not_found(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let nf = |r: Result<_, StoreError>| matches!(r, Err(StoreError::NotFound { .. }));
        assert!(nf(s.plan_get(42).await.map(|_| ())));
        assert!(nf(s.plan_start(42, "t", Ts::now()).await));
        assert!(nf(s.plan_retry(42, "t", Ts::now()).await));
        assert!(nf(s.plan_cancel(42, "t", Ts::now()).await));
        assert!(nf(s.task_retry(42, "t", Ts::now()).await.map(|_| ())));
        assert!(nf(s.task_cancel(42, "t", Ts::now()).await.map(|_| ())));
        assert!(nf(s.task_skip(42, "t", Ts::now()).await.map(|_| ())));
        assert!(nf(s.run_get(42).await.map(|_| ())));
        assert!(nf(s.run_log(42).await.map(|_| ())));
        s.ready().await.expect("a migrated database is ready");
    }

    pub async fn concurrent_claimers_never_share_a_run(kind: Kind) {
        let db = TestDb::new(kind).await;
        let setup = db.store().await;
        let tasks = noop_tasks(400);
        setup
            .plan_insert(&plan(json!({"name": "p", "tasks": tasks})), "t", Ts::now())
            .await
            .unwrap();
        assert_eq!(promote(setup.as_ref()).await.promoted, 400);
        let mut claimers = Vec::new();
        for i in 0..8 {
            let store: Arc<dyn Store> = db.store().await;
            claimers.push(tokio::spawn(async move {
                let me = format!("r-{i}");
                let mut mine = Vec::new();
                loop {
                    let got = store
                        .run_claim_many(&claim(&me, &[], 7), Ts::now())
                        .await
                        .expect("claim");
                    if got.is_empty() {
                        return mine;
                    }
                    mine.extend(got.into_iter().map(|c| c.id));
                }
            }));
        }
        let mut seen = HashSet::new();
        let mut busy = 0;
        for c in claimers {
            let mine = c.await.unwrap();
            busy += usize::from(!mine.is_empty());
            for id in mine {
                assert!(seen.insert(id), "run {id} claimed twice");
            }
        }
        assert_eq!(seen.len(), 400, "every run claimed once");
        assert!(busy >= 2, "claims were spread over several claimers");
    }

    pub async fn concurrent_promoters_respect_the_gates(kind: Kind) {
        let db = TestDb::new(kind).await;
        let setup = db.store().await;
        // 10 targets x 10 exclusive runs, in plans limited to 3 at a time.
        for p in 0..10 {
            let tasks = noop_tasks(10);
            setup
                .plan_insert(
                    &plan(json!({"name": format!("p{p}"), "parallel_limit": 3, "tasks": tasks})),
                    "t",
                    Ts::now(),
                )
                .await
                .unwrap();
        }
        let mut promoters = Vec::new();
        for _ in 0..8 {
            let store = db.store().await;
            promoters.push(tokio::spawn(async move {
                for _ in 0..5 {
                    store
                        .run_promote_round(&NodeLabels::default(), Ts::now())
                        .await
                        .expect("round");
                }
            }));
        }
        for p in promoters {
            p.await.unwrap();
        }
        let list = setup.plan_list(None, None, 100, 0).await.unwrap();
        let mut per_target = std::collections::HashMap::new();
        for summary in &list.plans {
            let view = setup.plan_get(summary.id).await.unwrap();
            let active: Vec<_> = view
                .tasks
                .iter()
                .filter(|t| t.status == TaskStatus::Available)
                .collect();
            assert!(
                active.len() <= 3,
                "plan {} has {} AVAILABLE",
                view.name,
                active.len()
            );
            for t in active {
                *per_target.entry(t.target.clone()).or_insert(0) += 1;
            }
        }
        assert_eq!(per_target.len(), 10, "every target got a run");
        assert!(
            per_target.values().all(|n| *n == 1),
            "one exclusive run per target: {per_target:?}"
        );
    }

    /// Retries that race each other (task and plan retries from eight
    /// replicas at once) or race an automatic retry still make exactly one
    /// new attempt per task each time: no two runs share a task and attempt
    /// number, and the numbers have no gaps.
    pub async fn racing_retries_create_one_attempt_each(kind: Kind) {
        let db = TestDb::new(kind).await;
        let setup = db.store().await;
        let tasks = noop_tasks(6);
        let id = setup
            .plan_insert(&plan(json!({"name": "p", "tasks": tasks})), "t", Ts::now())
            .await
            .unwrap();
        let task_ids: Vec<i64> = setup
            .plan_get(id)
            .await
            .unwrap()
            .tasks
            .iter()
            .map(|t| t.id)
            .collect();
        let mut stores = Vec::new();
        for _ in 0..8 {
            stores.push(db.store().await);
        }
        const ROUNDS: i64 = 3;
        for round in 1..=ROUNDS {
            let runs = promote_and_claim(setup.as_ref()).await;
            assert_eq!(runs.len(), task_ids.len());
            let finishes: Vec<_> = runs.iter().map(|r| failed(*r)).collect();
            setup
                .run_finish_many("r-test", &finishes, Ts::now())
                .await
                .unwrap();
            assert_eq!(setup.plan_get(id).await.unwrap().status, PlanStatus::Failed);
            let racers: Vec<_> = stores
                .iter()
                .enumerate()
                .map(|(i, store)| {
                    let (store, task_ids) = (store.clone(), task_ids.clone());
                    tokio::spawn(async move {
                        let mut made = 0;
                        if i % 2 == 0 {
                            for task in task_ids {
                                made += match store.task_retry(task, "racer", Ts::now()).await {
                                    Ok(_) => 1,
                                    Err(StoreError::Conflict(_)) => 0,
                                    Err(e) => panic!("task retry: {e}"),
                                };
                            }
                        } else {
                            made += match store.plan_retry(id, "racer", Ts::now()).await {
                                Ok(()) => 1,
                                Err(StoreError::Conflict(_)) => 0,
                                Err(e) => panic!("plan retry: {e}"),
                            };
                        }
                        made
                    })
                })
                .collect();
            let mut made = 0;
            for racer in racers {
                made += racer.await.unwrap();
            }
            assert!(made >= 1, "some retry went through");
            let view = setup.plan_get(id).await.unwrap();
            for task in &view.tasks {
                assert_eq!(
                    task.status,
                    TaskStatus::Pending,
                    "{} after round {round}",
                    task.name
                );
                assert_eq!(
                    task.attempt,
                    Some(round + 1),
                    "{} after round {round}",
                    task.name
                );
            }
        }

        // An operator's retries racing the automatic retry of a failing
        // attempt: the task is RUNNING or PENDING whenever they look.
        let auto = setup
            .plan_insert(
                &plan(json!({"name": "auto", "tasks": [{"name": "a", "target": "y", "max_attempts": 2, "sleep": "0s"}]})),
                "t",
                Ts::now(),
            )
            .await
            .unwrap();
        let auto_task = setup.plan_get(auto).await.unwrap().tasks[0].id;
        promote(setup.as_ref()).await;
        let run = setup
            .run_claim_many(&claim("r-auto", &[], 100), Ts::now())
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.task_id == auto_task)
            .expect("the auto task's run is claimed")
            .id;
        let operators: Vec<_> = stores
            .iter()
            .map(|store| {
                let store = store.clone();
                tokio::spawn(async move { store.task_retry(auto_task, "racer", Ts::now()).await })
            })
            .collect();
        let report = setup
            .run_finish_many("r-auto", &[failed(run)], Ts::now())
            .await
            .unwrap();
        assert_eq!(
            report.retried.len(),
            1,
            "the failed attempt is retried automatically"
        );
        for operator in operators {
            assert!(
                matches!(operator.await.unwrap(), Err(StoreError::Conflict(_))),
                "a RUNNING or PENDING task cannot be retried by hand"
            );
        }

        // Every run ever created, by task: attempts 1, 2, ... with no
        // number twice.
        let mut attempts: std::collections::HashMap<i64, Vec<i64>> = Default::default();
        for event in common::invariants::all_events(setup.as_ref()).await {
            if event.from.is_none() {
                let run = setup.run_get(event.run_id).await.unwrap();
                attempts.entry(run.task_id).or_default().push(run.attempt);
            }
        }
        for (task, mut numbers) in attempts {
            numbers.sort();
            let expected: Vec<i64> = if task == auto_task {
                vec![1, 2]
            } else {
                (1..=ROUNDS + 1).collect()
            };
            assert_eq!(numbers, expected, "attempts of task {task}");
        }
        db.assert_open_task_counts().await;
    }

    pub async fn sessions_last_until_they_expire_or_end(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = Ts::now();
        let hour = Duration::from_secs(3600);
        let session = |hash: &str, user: &str, expires_at: Ts| Session {
            token_hash: hash.into(),
            user_name: user.into(),
            created_at: t0,
            expires_at,
        };
        let alice = session("aa", "alice", t0.plus(hour));
        let old = session("bb", "bob", t0.plus(Duration::from_secs(60)));
        s.session_insert(&alice, t0).await.unwrap();
        s.session_insert(&old, t0).await.unwrap();
        assert_eq!(s.session_get("aa", t0).await.unwrap(), Some(alice.clone()));
        assert_eq!(s.session_get("bb", t0).await.unwrap(), Some(old));
        assert_eq!(
            s.session_get("zz", t0).await.unwrap(),
            None,
            "unknown token"
        );
        assert_eq!(
            s.session_get("aa", t0.plus(hour)).await.unwrap(),
            None,
            "a session ends at its expiry"
        );
        // The same token twice is refused rather than merged.
        assert!(s.session_insert(&alice, t0).await.is_err());

        // A sign-in two minutes on removes bob's expired session for good:
        // asking as of an earlier time no longer finds it.
        let later = t0.plus(Duration::from_secs(120));
        let carol = session("cc", "carol", later.plus(hour));
        s.session_insert(&carol, later).await.unwrap();
        assert_eq!(s.session_get("bb", t0).await.unwrap(), None, "purged");
        assert_eq!(s.session_get("aa", later).await.unwrap(), Some(alice));

        // Signing out ends only that session, and twice is harmless.
        s.session_delete("aa").await.unwrap();
        s.session_delete("aa").await.unwrap();
        assert_eq!(s.session_get("aa", later).await.unwrap(), None);
        assert_eq!(s.session_get("cc", later).await.unwrap(), Some(carol));
    }
}
