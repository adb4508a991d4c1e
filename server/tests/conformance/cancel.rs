//! Cancel holds the target (docs/design.md, "Operator actions"), on SQLite
//! and PostgreSQL: a cancel of a RUNNING run is a request; the run keeps
//! its status, target, plan slot and version until its replica confirms
//! the kill in its finish (CANCELED in the operator's name, never retried)
//! or the sweeper finds that replica stale; an execution that succeeded
//! before the kill stays DONE; a shutdown never hands such a run back.

use std::time::Duration;

use baton::store::{Finish, LogLine, StoreError};
use domain::model::{PlanStatus, RunStatus, TaskStatus};
use domain::time::Ts;
use serde_json::json;

use crate::common::store::{claim, done, failed, promote, replica, task_named};
use crate::common::{Kind, TestDb};
use crate::{SECOND, per_backend, submit};

per_backend!(cases:
    a_running_run_keeps_its_target_until_its_replica_confirms_the_kill,
    an_execution_that_succeeded_before_the_kill_stays_done,
    a_stale_owners_canceling_run_ends_canceled_without_a_retry,
    a_shutdown_does_not_hand_back_a_run_asked_to_cancel,
);

/// A plan of `first` (executing, three attempts) and `second` on the same
/// exclusive target, with `first` claimed by `r-1`: returns the plan id
/// and both tasks' ids and first runs.
async fn one_running_one_waiting(s: &dyn baton::store::Store) -> (i64, [(i64, i64); 2]) {
    let id = submit(
        s,
        json!({"name": "p", "tasks": [
            {"name": "first", "target": "db/a", "sleep": "1h", "max_attempts": 3},
            {"name": "second", "target": "db/a", "sleep": "0s"},
        ]}),
    )
    .await;
    s.replica_upsert(&replica("r-1", &[]), Ts::now())
        .await
        .unwrap();
    promote(s).await;
    let claimed = s
        .run_claim_many(&claim("r-1", &[], 5), Ts::now())
        .await
        .unwrap();
    let view = s.plan_get(id).await.unwrap();
    let (first, second) = (task_named(&view, "first"), task_named(&view, "second"));
    assert_eq!(
        claimed.len(),
        1,
        "only one run at a time on an exclusive target"
    );
    assert_eq!(claimed[0].id, first.run_id.unwrap());
    (
        id,
        [
            (first.id, first.run_id.unwrap()),
            (second.id, second.run_id.unwrap()),
        ],
    )
}

/// The second task is still waiting for the target, after a round.
async fn second_still_waits(s: &dyn baton::store::Store, id: i64) {
    promote(s).await;
    let view = s.plan_get(id).await.unwrap();
    let second = task_named(&view, "second");
    assert_eq!(second.status, TaskStatus::Pending, "{second:?}");
    assert!(
        s.run_claim_many(&claim("r-2", &[], 5), Ts::now())
            .await
            .unwrap()
            .is_empty(),
        "nothing may start beside the run being canceled"
    );
}

/// Once the first run ended, the second task gets the target.
async fn second_gets_the_target(s: &dyn baton::store::Store, id: i64) {
    promote(s).await;
    let view = s.plan_get(id).await.unwrap();
    assert_eq!(task_named(&view, "second").status, TaskStatus::Available);
}

mod cases {
    use super::*;

    pub async fn a_running_run_keeps_its_target_until_its_replica_confirms_the_kill(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let (id, [(first, run), (second, _)]) = one_running_one_waiting(s.as_ref()).await;

        s.task_cancel(first, "carol".into(), Ts::now())
            .await
            .unwrap();
        let view = s.plan_get(id).await.unwrap();
        let task = task_named(&view, "first");
        assert_eq!(
            task.status,
            TaskStatus::Running,
            "a request, not yet a cancel"
        );
        assert_eq!(task.cancel_requested_by.as_deref(), Some("carol"));
        assert!(task.cancel_requested_at.is_some());
        let got = s.run_get(run).await.unwrap();
        assert_eq!(got.status, RunStatus::Running);
        assert_eq!(got.cancel_requested_by.as_deref(), Some("carol"));
        second_still_waits(s.as_ref(), id).await;

        // Asking again is refused, naming why; the plan-wide cancel has
        // nothing else to do either.
        let again = s.task_cancel(first, "dave".into(), Ts::now()).await;
        assert!(
            matches!(&again, Err(StoreError::Conflict(m)) if m.contains("already being canceled")),
            "{again:?}"
        );
        s.task_cancel(second, "carol".into(), Ts::now())
            .await
            .unwrap();
        assert!(matches!(
            s.plan_cancel(id, "carol".into(), Ts::now()).await,
            Err(StoreError::Conflict(_))
        ));
        // Retry and Skip do not apply to a run still executing.
        assert!(matches!(
            s.task_retry(first, "carol".into(), Ts::now()).await,
            Err(StoreError::Conflict(_))
        ));

        // The owner still owns it: its beat says to stop, its lines land.
        let beaten = s
            .run_heartbeat_many("r-1", &[(run, 10 * SECOND)], Ts::now())
            .await
            .unwrap();
        assert_eq!((beaten.owned, beaten.canceling), (vec![], vec![run]));
        let line = LogLine {
            at: Ts::now(),
            stream: "stderr",
            line: "terminated".into(),
        };
        assert!(s.run_log_append("r-1", run, &[line]).await.unwrap());
        // Another replica's finish is fenced out.
        assert_eq!(
            s.run_finish_many("r-2", &[failed(run)], Ts::now())
                .await
                .unwrap()
                .fenced,
            vec![run]
        );

        // The owner's finish confirms the kill: CANCELED in carol's name,
        // no automatic retry although attempts were left.
        let report = s
            .run_finish_many("r-1", &[failed(run)], Ts::now())
            .await
            .unwrap();
        assert_eq!((report.finished, report.retried), (vec![run], vec![]));
        let got = s.run_get(run).await.unwrap();
        assert_eq!(got.status, RunStatus::Canceled);
        assert_eq!(got.error.as_deref(), Some("canceled by carol"));
        assert_eq!(s.run_log(run).await.unwrap(), "[stderr] terminated\n");
        let last = got.events.last().unwrap();
        assert_eq!(
            (
                last.from,
                last.to,
                last.actor.as_str(),
                last.replica_id.as_deref()
            ),
            (
                Some(RunStatus::Running),
                RunStatus::Canceled,
                "carol",
                Some("r-1")
            )
        );
        let view = s.plan_get(id).await.unwrap();
        assert_eq!(task_named(&view, "first").status, TaskStatus::Canceled);
        assert_eq!(view.status, PlanStatus::Canceled);
        // Now it is over, a Retry applies.
        s.task_retry(first, "carol".into(), Ts::now())
            .await
            .unwrap();
    }

    pub async fn an_execution_that_succeeded_before_the_kill_stays_done(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let (id, [(first, run), _]) = one_running_one_waiting(s.as_ref()).await;
        s.task_cancel(first, "carol".into(), Ts::now())
            .await
            .unwrap();
        // The command exited 0 as the cancel arrived: the work happened.
        s.run_finish_many("r-1", &[done(run)], Ts::now())
            .await
            .unwrap();
        let got = s.run_get(run).await.unwrap();
        assert_eq!((got.status, got.error), (RunStatus::Done, None));
        assert_eq!(got.events.last().unwrap().actor, "r-1");
        // And the target passes on to the next task.
        second_gets_the_target(s.as_ref(), id).await;
    }

    pub async fn a_stale_owners_canceling_run_ends_canceled_without_a_retry(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = Ts::now();
        let (id, [(first, run), _]) = one_running_one_waiting(s.as_ref()).await;
        s.task_cancel(first, "carol".into(), Ts::now())
            .await
            .unwrap();

        // The owner is alive: a sweep changes nothing, the target stays held.
        let report = s.run_sweep(10 * SECOND, None, Ts::now()).await.unwrap();
        assert_eq!((report.failed.len(), report.canceled.len()), (0, 0));
        second_still_waits(s.as_ref(), id).await;

        // The owner stopped heart-beating (frozen, or gone): once it is
        // stale its supervisor has killed the process, and the run ends
        // CANCELED in carol's name, never retried.
        let later = t0.plus(Duration::from_secs(30));
        let report = s.run_sweep(10 * SECOND, None, later).await.unwrap();
        assert!(report.failed.is_empty(), "{report:?}");
        assert_eq!(report.canceled.len(), 1, "{report:?}");
        assert_eq!(report.canceled[0].0, run);
        assert!(report.retried.is_empty(), "a cancel is never retried");
        let got = s.run_get(run).await.unwrap();
        assert_eq!(got.status, RunStatus::Canceled);
        let error = got.error.unwrap();
        assert!(
            error.starts_with("canceled by carol; replica r-1 stopped heart-beating"),
            "{error}"
        );
        let last = got.events.last().unwrap();
        assert_eq!(
            (last.to, last.actor.as_str()),
            (RunStatus::Canceled, "carol")
        );
        // The frozen owner, waking, is fenced out.
        let beaten = s
            .run_heartbeat_many("r-1", &[(run, 10 * SECOND)], later)
            .await
            .unwrap();
        assert!(beaten.owned.is_empty() && beaten.canceling.is_empty());
        assert_eq!(
            s.run_finish_many("r-1", &[done(run)], later)
                .await
                .unwrap()
                .fenced,
            vec![run]
        );
        second_gets_the_target(s.as_ref(), id).await;
    }

    pub async fn a_shutdown_does_not_hand_back_a_run_asked_to_cancel(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let (id, [(first, run), _]) = one_running_one_waiting(s.as_ref()).await;
        s.task_cancel(first, "carol".into(), Ts::now())
            .await
            .unwrap();
        let back = s
            .run_hand_back_many("r-1", &[run], "handed back at shutdown", Ts::now())
            .await
            .unwrap();
        assert!(
            back.is_empty(),
            "an operator's cancel is not work to hand on"
        );
        assert_eq!(
            s.run_get(run).await.unwrap().status,
            RunStatus::Running,
            "still held until the kill is confirmed"
        );
        second_still_waits(s.as_ref(), id).await;
        // The replica confirms instead, as its worker does.
        let stopped = Finish {
            run_id: run,
            status: RunStatus::Canceled,
            result_code: None,
            error: Some("stopped by replica r-1 at shutdown".into()),
        };
        s.run_finish_many("r-1", &[stopped], Ts::now())
            .await
            .unwrap();
        let got = s.run_get(run).await.unwrap();
        assert_eq!(
            (got.status, got.error.as_deref()),
            (RunStatus::Canceled, Some("canceled by carol"))
        );
    }
}
