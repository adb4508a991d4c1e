//! Claims and finishes on SQLite and PostgreSQL: a claim takes up to its
//! limit and honours node labels, a finish is fenced to the run's owner and
//! recorded, failed runs retry with backoff until their attempts run out,
//! and log lines are fenced and kept in order.

use std::time::Duration;

use baton::store::LogLine;
use domain::gates::NodeLabels;
use domain::model::{PlanStatus, RunStatus, TaskStatus};
use domain::time::Ts;
use serde_json::json;

use crate::common::store::{claim, done, failed, promote, promote_and_claim, task_named};
use crate::common::{Kind, TestDb, plan};
use crate::per_backend;

per_backend!(cases:
    claim_takes_up_to_the_limit_and_honours_labels,
    a_round_claims_its_oldest_promotions_for_its_replica,
    finish_is_fenced_and_recorded,
    a_run_named_twice_in_a_finish_ends_once_as_first_named,
    failed_runs_retry_with_backoff_until_attempts_run_out,
    logs_are_fenced_and_ordered,
);

mod cases {
    use super::*;

    pub async fn claim_takes_up_to_the_limit_and_honours_labels(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let mut tasks: Vec<_> = (0..5).map(|i| json!({"name": format!("t{i}"), "target": format!("x{i}"), "timeout": "5m", "sleep": "0s"})).collect();
        tasks.push(json!({"name": "pinned", "target": "y", "node": "gpu", "sleep": "0s"}));
        let id = s
            .plan_insert(
                &plan(json!({"name": "p", "tasks": tasks})),
                "t".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        let mut nodes = NodeLabels::default();
        nodes.live.insert("gpu".into());
        assert_eq!(
            s.run_promote_round(&nodes, None, Ts::now())
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
        let answered = Ts::now();
        for c in &first {
            // Stamped once the claim held its lock: after it was asked
            // for, before its answer came back.
            assert!(now <= c.started_at && c.started_at <= answered);
            assert_eq!(c.deadline, c.started_at.plus(Duration::from_secs(300)));
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

    /// A round asked to claim takes, for that replica, the oldest runs it
    /// promotes that the replica may execute, up to the limit: straight to
    /// RUNNING, with the promotion's event and then the claim's. The rest
    /// wait AVAILABLE for any claimer.
    pub async fn a_round_claims_its_oldest_promotions_for_its_replica(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let mut tasks: Vec<_> = (0..4).map(|i| json!({"name": format!("t{i}"), "target": format!("x{i}"), "timeout": "5m", "sleep": "0s"})).collect();
        // Older than t1..t3 by id, but only a gpu replica may take it.
        tasks.insert(
            0,
            json!({"name": "pinned", "target": "y", "node": "gpu", "sleep": "0s"}),
        );
        let id = s
            .plan_insert(
                &plan(json!({"name": "p", "tasks": tasks})),
                "t".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        let mut nodes = NodeLabels::default();
        nodes.live.insert("gpu".into());
        let round_at = Ts::now();
        let report = s
            .run_promote_round(&nodes, Some(&claim("r-lead", &[], 2)), round_at)
            .await
            .unwrap();
        let answered = Ts::now();
        assert_eq!(report.promoted, 5, "claimed runs count as promoted");
        assert_eq!(report.waiting, 0);
        assert!(report.claimed_at.is_some());
        let view = s.plan_get(id).await.unwrap();
        let run_of = |name: &str| task_named(&view, name).run_id.unwrap();
        let claimed: Vec<i64> = report.claimed.iter().map(|c| c.id).collect();
        assert_eq!(
            claimed,
            [run_of("t0"), run_of("t1")],
            "the oldest it may run"
        );
        for c in &report.claimed {
            assert!(round_at <= c.started_at && c.started_at <= answered);
            assert_eq!(c.deadline, c.started_at.plus(Duration::from_secs(300)));
            assert_eq!(c.heartbeat_timeout, Duration::from_secs(10));
            assert_eq!(c.executor["kind"], "sleep");
            let run = s.run_get(c.id).await.unwrap();
            assert_eq!(run.status, RunStatus::Running);
            assert_eq!(run.replica_id.as_deref(), Some("r-lead"));
            assert_eq!(run.waiting_cause, None);
            let path: Vec<_> = run
                .events
                .iter()
                .map(|e| (e.to, e.actor.as_str(), e.at))
                .collect();
            assert_eq!(
                path[1..],
                [
                    (RunStatus::Available, "scheduler", round_at.0),
                    (RunStatus::Running, "r-lead", c.started_at.0),
                ]
            );
            assert!(run.events.windows(2).all(|w| w[0].id < w[1].id));
        }
        for name in ["pinned", "t2", "t3"] {
            assert_eq!(task_named(&view, name).status, TaskStatus::Available);
        }
        // The rest are anyone's, and the claimed ones no one else's.
        let rest = s
            .run_claim_many(&claim("r-two", &[], 10), Ts::now())
            .await
            .unwrap();
        assert_eq!(
            rest.iter().map(|c| c.id).collect::<Vec<_>>(),
            [run_of("t2"), run_of("t3")]
        );
        // Finished by the replica the round claimed them for.
        let report = s
            .run_finish_many("r-lead", &[done(claimed[0]), done(claimed[1])], Ts::now())
            .await
            .unwrap();
        assert!(report.fenced.is_empty());

        // A round with nothing to promote, or no slot, claims nothing.
        let idle = s
            .run_promote_round(&nodes, Some(&claim("r-lead", &[], 5)), Ts::now())
            .await
            .unwrap();
        assert!(idle.claimed.is_empty() && idle.claimed_at.is_none());
        let later = s
            .plan_insert(
                &plan(json!({"name": "q", "tasks": [
                    {"name": "gpu", "target": "z", "node": "gpu", "sleep": "0s"},
                    {"name": "any", "target": "w", "sleep": "0s"}]})),
                "t".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        let none = s
            .run_promote_round(&nodes, Some(&claim("r-lead", &[], 0)), Ts::now())
            .await
            .unwrap();
        assert_eq!((none.promoted, none.claimed.len()), (2, 0));
        let later = s.plan_get(later).await.unwrap();
        assert!(
            later
                .tasks
                .iter()
                .all(|t| t.status == TaskStatus::Available)
        );
        // A labelled replica's round takes pinned runs too.
        let again = s
            .plan_insert(
                &plan(json!({"name": "r", "tasks": [
                    {"name": "gpu", "target": "z2", "node": "gpu", "sleep": "0s"}]})),
                "t".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        let gpu = vec!["gpu".to_string()];
        let labelled = s
            .run_promote_round(&nodes, Some(&claim("r-gpu", &gpu, 5)), Ts::now())
            .await
            .unwrap();
        let again = s.plan_get(again).await.unwrap();
        assert_eq!(
            labelled.claimed.iter().map(|c| c.id).collect::<Vec<_>>(),
            [again.tasks[0].run_id.unwrap()]
        );
    }

    pub async fn finish_is_fenced_and_recorded(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let id = s
            .plan_insert(
                &plan(json!({"name": "p", "tasks": [{"name": "a", "target": "x", "sleep": "0s"}]})),
                "t".into(),
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

    pub async fn a_run_named_twice_in_a_finish_ends_once_as_first_named(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        s.plan_insert(
            &plan(json!({"name": "p", "tasks": [{"name": "a", "target": "x", "sleep": "0s"}]})),
            "t".into(),
            Ts::now(),
        )
        .await
        .unwrap();
        let runs = promote_and_claim(s.as_ref()).await;
        let report = s
            .run_finish_many("r-test", &[done(runs[0]), failed(runs[0])], Ts::now())
            .await
            .unwrap();
        assert_eq!(report.finished, runs);
        assert!(report.fenced.is_empty(), "fenced: {:?}", report.fenced);
        assert!(report.retried.is_empty());
        let run = s.run_get(runs[0]).await.unwrap();
        assert_eq!(run.status, RunStatus::Done);
        assert_eq!(run.result_code, Some(0));
        let ends = run
            .events
            .iter()
            .filter(|e| e.to == RunStatus::Done)
            .count();
        assert_eq!(ends, 1, "one end recorded: {:?}", run.events);
        assert_eq!(run.events.len(), 4);
    }

    pub async fn failed_runs_retry_with_backoff_until_attempts_run_out(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let id = s.plan_insert(&plan(json!({"name": "p", "tasks": [{"name": "a", "target": "x", "max_attempts": 2, "sleep": "0s"}]})), "t".into(), Ts::now()).await.unwrap();
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
        // Not before its backoff is over, and the cause says it is one
        // (not a start time).
        promote(s.as_ref()).await;
        let cause = s.plan_get(id).await.unwrap().tasks[0]
            .waiting_cause
            .clone()
            .unwrap();
        assert!(
            cause.starts_with("retry backoff: attempt 2 may start after "),
            "{cause}"
        );
        s.run_promote_round(
            &NodeLabels::default(),
            None,
            now.plus(Duration::from_secs(2)),
        )
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

    pub async fn logs_are_fenced_and_ordered(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        s.plan_insert(
            &plan(json!({"name": "p", "tasks": [{"name": "a", "target": "x", "sleep": "0s"}]})),
            "t".into(),
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
}
