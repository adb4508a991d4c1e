//! The gates a promotion round applies, on SQLite and PostgreSQL: exclusive
//! and shared targets, versions in natural order, plan limits, `run_at`,
//! node pins and pinned work losing its pin after `reassign_after`, each
//! waiting run explaining what it waits for.

use domain::gates::NodeLabels;
use domain::model::{RunStatus, TaskStatus};
use domain::time::Ts;
use serde_json::json;

use crate::common::store::{claim, done, noop_tasks, promote, replica, task_named};
use crate::common::{Kind, TestDb, plan};
use crate::{SECOND, per_backend, pinned_run_handed_back, submit};

per_backend!(cases:
    exclusive_runs_share_no_target,
    versions_go_in_natural_order,
    plan_limit_caps_active_runs,
    run_at_and_node_gates_explain_themselves,
    pinned_runs_lose_their_pin_after_reassign_after,
    an_available_run_whose_node_is_gone_loses_its_pin,
);

mod cases {
    use super::*;

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
                "t".into(),
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
            .plan_insert(&plan(json!({"name": "later", "tasks": [{"name": "v10", "target": "db/a", "exclusive": false, "version": "1.10", "sleep": "0s"}]})), "t".into(), Ts::now())
            .await
            .unwrap();
        let earlier = s
            .plan_insert(&plan(json!({"name": "earlier", "tasks": [{"name": "v9", "target": "db/a", "exclusive": false, "version": "1.9", "sleep": "0s"}]})), "t".into(), Ts::now())
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
                "t".into(),
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
                "t".into(),
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
            Some("no live replica or agent labelled gpu (never seen); runs anywhere in 4 min")
        );
        // Time passes, a gpu replica shows up: both go.
        let mut nodes = NodeLabels::default();
        nodes.live.insert("gpu".into());
        let report = s
            .run_promote_round(&nodes, None, Ts::from(at + chrono::TimeDelta::seconds(1)))
            .await
            .unwrap();
        assert_eq!(report.promoted, 2);
    }

    pub async fn pinned_runs_lose_their_pin_after_reassign_after(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let id = submit(
            s.as_ref(),
            json!({"name": "p", "tasks": [
                {"name": "gpu", "target": "a", "sleep": "0s", "node": "gpu", "reassign_after": "1m"},
                {"name": "forever", "target": "b", "sleep": "0s", "node": "gpu", "reassign_after": "never"},
            ]}),
        )
        .await;
        let nodes = NodeLabels::default();
        let t0 = Ts::now();
        let round = s.run_promote_round(&nodes, None, t0).await.unwrap();
        assert_eq!(round.promoted, 0);
        let view = s.plan_get(id).await.unwrap();
        let gpu = task_named(&view, "gpu");
        assert_eq!(
            gpu.waiting_cause.as_deref(),
            Some("no live replica or agent labelled gpu (never seen); runs anywhere in 59 s")
        );
        assert_eq!(
            task_named(&view, "forever").waiting_cause.as_deref(),
            Some(
                "no live replica or agent labelled gpu (never seen); pinned for good (reassign_after: never)"
            )
        );
        let later = t0.plus(61 * SECOND);
        let round = s.run_promote_round(&nodes, None, later).await.unwrap();
        assert_eq!(round.promoted, 1);
        let run = s.run_get(gpu.run_id.unwrap()).await.unwrap();
        assert_eq!(run.status, RunStatus::Available);
        let unpinned = run
            .events
            .iter()
            .find(|e| e.from == Some(RunStatus::Pending) && e.to == RunStatus::Pending)
            .expect("an event records the lost pin");
        assert!(
            unpinned
                .detail
                .as_deref()
                .unwrap()
                .starts_with("pin to node gpu dropped: no live replica carried it for 1m"),
            "{unpinned:?}"
        );
        // A replica without the label may now run it; "forever" still waits.
        let got = s
            .run_claim_many(&claim("r-plain", &[], 5), later)
            .await
            .unwrap();
        assert_eq!(got.iter().map(|r| r.id).collect::<Vec<_>>(), vec![run.id]);
        let view = s.plan_get(id).await.unwrap();
        assert_eq!(
            task_named(&view, "forever").status,
            domain::model::TaskStatus::Pending
        );
    }

    /// A pinned run promoted while its node was alive, then handed back
    /// by that node's replica at shutdown (its heartbeat row deleted with
    /// it), is AVAILABLE with nobody to claim it: the sweep drops its pin
    /// after `reassign_after`, not before, and not while a replica with
    /// the label is alive (invariant 7).
    pub async fn an_available_run_whose_node_is_gone_loses_its_pin(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let stale_after = 10 * SECOND;
        let t0 = Ts::now();
        s.replica_upsert(&replica("r-gpu", &["gpu"]), t0)
            .await
            .unwrap();
        let (id, run) = pinned_run_handed_back(s.as_ref(), t0).await;

        // While r-gpu is alive the pin holds, however late it is.
        let late = t0.plus(120 * SECOND);
        s.replica_upsert(&replica("r-gpu", &["gpu"]), late)
            .await
            .unwrap();
        assert!(
            s.run_unpin_stranded(stale_after, late)
                .await
                .unwrap()
                .is_empty()
        );
        // It shuts down: its row goes, and the run waits for no one.
        s.replica_delete("r-gpu").await.unwrap();
        let none: Vec<String> = Vec::new();
        assert!(
            s.run_claim_many(&claim("r-plain", &none, 5), late)
                .await
                .unwrap()
                .is_empty(),
            "still pinned: a replica without the label may not take it"
        );
        let unpinned = s.run_unpin_stranded(stale_after, late).await.unwrap();
        assert_eq!(
            unpinned,
            vec![run],
            "reassign_after passed since it was made"
        );
        assert!(
            s.run_unpin_stranded(stale_after, late)
                .await
                .unwrap()
                .is_empty(),
            "once"
        );
        let view = s.run_get(run).await.unwrap();
        assert_eq!(view.status, RunStatus::Available);
        assert_eq!(view.attempt, 1, "the same attempt, not a retry");
        let last = view.events.last().unwrap();
        assert_eq!(
            (last.from, last.to),
            (Some(RunStatus::Available), RunStatus::Available)
        );
        assert!(
            last.detail
                .as_deref()
                .unwrap()
                .starts_with("pin to node gpu dropped: no live replica carried it for 1m"),
            "{last:?}"
        );
        let got = s
            .run_claim_many(&claim("r-plain", &none, 5), late)
            .await
            .unwrap();
        assert_eq!(got.iter().map(|r| r.id).collect::<Vec<_>>(), vec![run]);
        let view = s.plan_get(id).await.unwrap();
        assert_eq!(task_named(&view, "gpu").status, TaskStatus::Running);
    }
}
