//! Liveness store operations (docs/design.md, "Liveness"), on SQLite and
//! PostgreSQL: the leader lease, the sweeper, graceful hand-back, run
//! heartbeats, the replica list with its running counts and heartbeat-row
//! pruning. Time is passed in, so expiry is tested without waiting for it.

use std::time::Duration;

use baton::store::LEADER_LEASE;
use domain::gates::NodeLabels;
use domain::model::{RunStatus, TaskStatus};
use domain::time::Ts;
use serde_json::json;

use crate::common::store::{claim, done, failed, promote, replica, task_named};
use crate::common::{Kind, TestDb, plan};
use crate::{SECOND, per_backend, pinned_run_handed_back, submit};

per_backend!(cases:
    the_lease_has_one_holder_until_it_expires,
    concurrent_replicas_agree_on_one_leader,
    the_sweeper_fails_runs_of_stale_or_vanished_replicas,
    a_late_success_is_noted_on_the_run_the_sweeper_failed,
    a_late_success_ends_its_retry_unless_it_started,
    the_sweeper_fails_runs_past_their_deadlines,
    run_heartbeats_use_each_runs_own_timeout,
    hand_back_returns_runs_to_available_with_their_attempt,
    replicas_are_listed_with_their_running_count,
    old_heartbeat_rows_are_pruned,
    a_drained_worker_is_told_and_its_labels_count_as_gone,
    a_replica_starting_under_an_outside_lock_waits_for_it,
    a_new_leader_discounts_the_stretch_its_predecessor_could_not_judge,
    a_heartbeat_held_up_by_a_lock_is_trouble_the_sweeper_discounts,
    a_beat_recorded_beside_a_held_row_counts_until_it_lapses,
    a_replica_beat_recorded_beside_its_held_row_keeps_it_live,
    a_replica_beat_recorded_beside_its_held_row_keeps_its_labels_live,
);

/// `at` as a literal of the backend's timestamp column, for rows written
/// by hand.
fn stamp_sql(kind: Kind, at: Ts) -> String {
    match kind {
        Kind::Sqlite => at.micros().to_string(),
        Kind::Postgres => format!("to_timestamp({} / 1e6)", at.micros()),
    }
}

/// Records `at` as `replica_id`'s beat beside its held row, as a
/// heartbeat held up by another client's lock would.
async fn held_replica_beat(db: &TestDb, kind: Kind, replica_id: &str, at: Ts) {
    let stamp = stamp_sql(kind, at);
    db.execute(&format!(
        "INSERT INTO held_replica_heartbeat (replica_id, at) VALUES ('{replica_id}', {stamp})"
    ))
    .await;
}

mod cases {
    use super::*;

    pub async fn the_lease_has_one_holder_until_it_expires(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = Ts::now();
        let ttl = 6 * SECOND;
        assert_eq!(s.lease_get(LEADER_LEASE).await.unwrap(), None);
        let a = s.lease_acquire(LEADER_LEASE, "r-a", ttl, t0).await.unwrap();
        assert_eq!((a.holder.as_str(), a.expires_at), ("r-a", t0.plus(ttl)));
        // Another replica cannot take a live lease…
        let t1 = t0.plus(2 * SECOND);
        let b = s.lease_acquire(LEADER_LEASE, "r-b", ttl, t1).await.unwrap();
        assert_eq!(b, a);
        // …the holder renews it, keeping when it took it…
        let renewed = s.lease_acquire(LEADER_LEASE, "r-a", ttl, t1).await.unwrap();
        assert_eq!(renewed.acquired_at, t0);
        assert_eq!(renewed.expires_at, t1.plus(ttl));
        // …and once it expires, the other takes over.
        let t2 = t1.plus(ttl);
        let b = s.lease_acquire(LEADER_LEASE, "r-b", ttl, t2).await.unwrap();
        assert_eq!((b.holder.as_str(), b.acquired_at), ("r-b", t2));
        // Only the holder can release it.
        s.lease_release(LEADER_LEASE, "r-a").await.unwrap();
        assert_eq!(s.lease_get(LEADER_LEASE).await.unwrap(), Some(b));
        s.lease_release(LEADER_LEASE, "r-b").await.unwrap();
        assert_eq!(s.lease_get(LEADER_LEASE).await.unwrap(), None);
    }

    pub async fn concurrent_replicas_agree_on_one_leader(kind: Kind) {
        let db = TestDb::new(kind).await;
        let stores = db.stores(8).await;
        let now = Ts::now();
        let mut attempts = tokio::task::JoinSet::new();
        for (i, store) in stores.into_iter().enumerate() {
            attempts.spawn(async move {
                let me = format!("r-{i}");
                let lease = store
                    .lease_acquire(LEADER_LEASE, &me, 6 * SECOND, now)
                    .await
                    .unwrap();
                (me, lease.holder)
            });
        }
        let answers = attempts.join_all().await;
        let leaders: Vec<_> = answers.iter().filter(|(me, held)| me == held).collect();
        assert_eq!(leaders.len(), 1, "{answers:?}");
        assert!(answers.iter().all(|(_, held)| *held == leaders[0].0));
    }

    /// Verdicts discount the time nobody could write, whichever replica
    /// leads: the stretch is reckoned from the last round that judged,
    /// whoever ran it, and a stretch one leader closed holds for the next.
    /// (A leader that kept this in its own memory took it with it when the
    /// lease changed hands behind an outside lock, and its successor failed
    /// a run whose command had just exited 0, which then ran again.)
    pub async fn a_new_leader_discounts_the_stretch_its_predecessor_could_not_judge(kind: Kind) {
        let db = TestDb::new(kind).await;
        let [old_leader, new_leader]: [_; 2] = db.stores(2).await.try_into().ok().unwrap();
        let t0 = Ts::now();
        submit(
            old_leader.as_ref(),
            json!({"name": "p", "tasks": [{"name": "t", "target": "a", "sleep": "1h"}]}),
        )
        .await;
        promote(old_leader.as_ref()).await;
        old_leader
            .replica_upsert(&replica("r-busy", &[]), t0)
            .await
            .unwrap();
        let got = old_leader
            .run_claim_many(&claim("r-busy", &[], 1), t0)
            .await
            .unwrap();
        let run = got[0].id;
        let sweep = |store: &std::sync::Arc<dyn baton::store::Store>,
                     troubled: Option<u32>,
                     at: u32| {
            let (store, troubled_at) = (store.clone(), troubled.map(|secs| t0.plus(secs * SECOND)));
            async move {
                store
                    .run_sweep(10 * SECOND, troubled_at, t0.plus(at * SECOND))
                    .await
                    .unwrap()
            }
        };

        // The old leader's last round that judged, at 1 s.
        let report = sweep(&old_leader, None, 1).await;
        assert_eq!((report.failed.len(), report.written_off), (0, None));
        // The new leader's own rounds failed (the outside lock) until 11 s;
        // at 12 s the run's heartbeat deadline (10 s) and its replica's
        // staleness (10 s) have passed, but not counting the 11 s since
        // the old leader's round, which nobody could have written in.
        let report = sweep(&new_leader, Some(11), 12).await;
        assert_eq!(report.written_off, Some(11 * SECOND), "{report:?}");
        assert!(report.failed.is_empty(), "judged at once: {report:?}");
        // The lease goes back; the old leader saw no trouble itself, and
        // still discounts that stretch for the next stale period…
        let report = sweep(&old_leader, None, 15).await;
        assert_eq!((report.failed.len(), report.written_off), (0, None));
        let report = sweep(&old_leader, None, 20).await;
        assert!(report.failed.is_empty(), "{report:?}");
        // …and no longer once it is over: the replica never beat again.
        let report = sweep(&new_leader, None, 23).await;
        assert_eq!(
            report.failed.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            [run]
        );

        // Trouble seen before the last round that judged is over.
        let report = sweep(&new_leader, Some(11), 24).await;
        assert_eq!(report.written_off, None);
    }

    /// A replica cut off past `stale_after` whose commands then exited 0:
    /// its finishes are fenced, and the run the sweeper failed says in its
    /// error that the command succeeded after all, once however often the
    /// finish is sent. A run an operator canceled, and a late failure,
    /// are left as they are.
    pub async fn a_late_success_is_noted_on_the_run_the_sweeper_failed(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = Ts::now();
        let id = submit(
            s.as_ref(),
            json!({"name": "p", "tasks": [
                {"name": "late", "target": "a", "sleep": "1h"},
                {"name": "canceled", "target": "b", "sleep": "1h"},
                {"name": "failing", "target": "c", "sleep": "1h"},
            ]}),
        )
        .await;
        promote(s.as_ref()).await;
        s.replica_upsert(&replica("r-cut", &[]), t0).await.unwrap();
        let got = s.run_claim_many(&claim("r-cut", &[], 3), t0).await.unwrap();
        assert_eq!(got.len(), 3);
        let view = s.plan_get(id).await.unwrap();
        let run = |name: &str| task_named(&view, name).run_id.unwrap();
        let (late, canceled, failing) = (run("late"), run("canceled"), run("failing"));
        s.task_cancel(task_named(&view, "canceled").id, "carol".into(), t0)
            .await
            .unwrap();
        let report = s
            .run_sweep(10 * SECOND, None, t0.plus(12 * SECOND))
            .await
            .unwrap();
        assert_eq!((report.failed.len(), report.canceled.len()), (2, 1));
        let canceled_error = s.run_get(canceled).await.unwrap().error;
        let failing_error = s.run_get(failing).await.unwrap().error;

        for _ in 0..2 {
            let finishes = [done(late), done(canceled), failed(failing)];
            let report = s
                .run_finish_many("r-cut", &finishes, t0.plus(13 * SECOND))
                .await
                .unwrap();
            assert!(report.finished.is_empty(), "{report:?}");
            assert_eq!(report.fenced.len(), 3, "{report:?}");
        }
        let noted = s.run_get(late).await.unwrap();
        assert_eq!(noted.status, RunStatus::Failed);
        let cause = format!("replica r-cut stopped heart-beating at {}", t0.clock());
        assert_eq!(
            noted.error.as_deref(),
            Some(format!("{cause}; its command exited 0 all the same (replica r-cut reported it after the run was failed)").as_str())
        );
        assert_eq!(s.run_get(canceled).await.unwrap().error, canceled_error);
        assert_eq!(s.run_get(failing).await.unwrap().error, failing_error);
    }

    /// A late success is the task's success: the automatic retry the
    /// sweeper made, not yet claimed, ends DONE without running, and what
    /// waited for the task goes on. A retry already claimed runs (its
    /// command is not cut off); only the note on the failed run says so.
    pub async fn a_late_success_ends_its_retry_unless_it_started(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = Ts::now();
        let id = submit(
            s.as_ref(),
            json!({"name": "p", "tasks": [
                {"name": "late", "target": "a", "sleep": "1h", "max_attempts": 2},
                {"name": "claimed", "target": "b", "sleep": "1h", "max_attempts": 2},
                {"name": "next", "target": "c", "sleep": "1h", "depends_on": ["late"]},
            ]}),
        )
        .await;
        promote(s.as_ref()).await;
        s.replica_upsert(&replica("r-cut", &[]), t0).await.unwrap();
        let got = s.run_claim_many(&claim("r-cut", &[], 3), t0).await.unwrap();
        assert_eq!(got.len(), 2, "next waits for late");
        let view = s.plan_get(id).await.unwrap();
        let first = |name: &str| task_named(&view, name).run_id.unwrap();
        let (late, claimed) = (first("late"), first("claimed"));
        let report = s
            .run_sweep(10 * SECOND, None, t0.plus(12 * SECOND))
            .await
            .unwrap();
        assert_eq!((report.failed.len(), report.retried.len()), (2, 2));
        let view = s.plan_get(id).await.unwrap();
        let retry_of_late = task_named(&view, "late").run_id.unwrap();
        assert_ne!(retry_of_late, late);

        // Reported before the retry starts (it waits out its backoff).
        for _ in 0..2 {
            s.run_finish_many(
                "r-cut",
                &[done(late)],
                t0.plus(Duration::from_millis(12_500)),
            )
            .await
            .unwrap();
        }
        let retry = s.run_get(retry_of_late).await.unwrap();
        let why = format!(
            "not executed: run {late}, the attempt before, succeeded after all \
             (replica r-cut reported its exit 0 after the run was failed)"
        );
        assert_eq!(
            (retry.status, retry.error.as_deref(), retry.started_at),
            (RunStatus::Done, Some(why.as_str()), None)
        );
        let last = retry.events.last().unwrap();
        assert_eq!(
            (last.from, last.to, last.actor.as_str()),
            (Some(RunStatus::Pending), RunStatus::Done, "r-cut")
        );
        assert_eq!(
            retry
                .events
                .iter()
                .filter(|e| e.to == RunStatus::Done)
                .count(),
            1
        );
        let view = s.plan_get(id).await.unwrap();
        let late_task = task_named(&view, "late");
        assert_eq!(
            (late_task.status, late_task.attempt),
            (TaskStatus::Done, Some(2))
        );

        // The plan goes on: `next` and the other retry start.
        s.run_promote_round(&NodeLabels::default(), None, t0.plus(14 * SECOND))
            .await
            .unwrap();
        s.replica_upsert(&replica("r-other", &[]), t0.plus(14 * SECOND))
            .await
            .unwrap();
        let got = s
            .run_claim_many(&claim("r-other", &[], 5), t0.plus(14 * SECOND))
            .await
            .unwrap();
        assert_eq!(got.len(), 2, "next and the retry of claimed: {got:?}");
        let report = s
            .run_finish_many("r-cut", &[done(claimed)], t0.plus(15 * SECOND))
            .await
            .unwrap();
        assert_eq!(report.succeeded_late, vec![claimed]);
        let view = s.plan_get(id).await.unwrap();
        for name in ["claimed", "next"] {
            assert_eq!(
                task_named(&view, name).status,
                TaskStatus::Running,
                "{name}"
            );
        }
        assert_eq!(task_named(&view, "claimed").attempt, Some(2));
    }

    pub async fn the_sweeper_fails_runs_of_stale_or_vanished_replicas(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = Ts::now();
        let id = submit(
            s.as_ref(),
            json!({"name": "p", "tasks": [
                {"name": "stale", "target": "a", "sleep": "1h", "max_attempts": 2},
                {"name": "gone", "target": "b", "sleep": "1h"},
                {"name": "fine", "target": "c", "sleep": "1h"},
            ]}),
        )
        .await;
        promote(s.as_ref()).await;
        for (r, expected) in [("r-stale", 1), ("r-gone", 1), ("r-fine", 1)] {
            s.replica_upsert(&replica(r, &[]), t0).await.unwrap();
            let got = s.run_claim_many(&claim(r, &[], 1), t0).await.unwrap();
            assert_eq!(got.len(), expected);
        }
        s.replica_delete("r-gone").await.unwrap();
        let t1 = t0.plus(8 * SECOND);
        s.replica_upsert(&replica("r-fine", &[]), t1).await.unwrap();
        // Nothing is stale yet except the vanished replica.
        let report = s.run_sweep(10 * SECOND, None, t1).await.unwrap();
        assert_eq!(report.failed.len(), 1);
        assert!(
            report.failed[0].1.starts_with("replica r-gone is gone"),
            "{:?}",
            report.failed
        );

        let t2 = t0.plus(12 * SECOND);
        s.replica_upsert(&replica("r-fine", &[]), t2).await.unwrap();
        let view = s.plan_get(id).await.unwrap();
        let fine_run = task_named(&view, "fine").run_id.unwrap();
        s.run_heartbeat_many("r-fine", &[(fine_run, 10 * SECOND)], t2)
            .await
            .unwrap();
        let report = s.run_sweep(10 * SECOND, None, t2).await.unwrap();
        let stale_run = task_named(&view, "stale").run_id.unwrap();
        let cause = format!("replica r-stale stopped heart-beating at {}", t0.clock());
        assert_eq!(report.failed, vec![(stale_run, cause.clone())]);
        assert_eq!(report.retried.len(), 1, "attempts were left");

        let run = s.run_get(stale_run).await.unwrap();
        assert_eq!(run.status, RunStatus::Failed);
        assert_eq!(run.error.as_deref(), Some(cause.as_str()));
        let last = run.events.last().unwrap();
        assert_eq!(
            (last.actor.as_str(), last.replica_id.as_deref()),
            ("scheduler", Some("r-stale"))
        );
        assert_eq!(last.detail.as_deref(), Some(cause.as_str()));
        let view = s.plan_get(id).await.unwrap();
        let stale = task_named(&view, "stale");
        assert_eq!(
            (stale.status, stale.attempt),
            (domain::model::TaskStatus::Pending, Some(2))
        );
        assert_eq!(
            task_named(&view, "fine").status,
            domain::model::TaskStatus::Running
        );
        // The stale replica, back, is fenced out of its old run.
        assert!(
            s.run_heartbeat_many("r-stale", &[(stale_run, 10 * SECOND)], t2)
                .await
                .unwrap()
                .owned
                .is_empty()
        );
        let finish = s
            .run_finish_many("r-stale", &[done(stale_run)], t2)
            .await
            .unwrap();
        assert_eq!(finish.fenced, vec![stale_run]);
        // A second sweep finds nothing more.
        assert!(
            s.run_sweep(10 * SECOND, None, t2)
                .await
                .unwrap()
                .failed
                .is_empty()
        );
    }

    /// A run heartbeat that waited out a held row's lock records itself
    /// beside the row (`held_run_heartbeat`; only PostgreSQL has row locks and
    /// writes it, written here by hand): the sweeper judges the later of
    /// the two deadlines, names it in the cause, and deletes the record
    /// once the run has ended.
    pub async fn a_beat_recorded_beside_a_held_row_counts_until_it_lapses(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = Ts::now();
        let id = submit(
            s.as_ref(),
            json!({"name": "p", "tasks": [
                {"name": "held", "target": "a", "sleep": "1h", "heartbeat_timeout": "2s"},
            ]}),
        )
        .await;
        promote(s.as_ref()).await;
        s.replica_upsert(&replica("r-1", &[]), t0).await.unwrap();
        let got = s.run_claim_many(&claim("r-1", &[], 1), t0).await.unwrap();
        assert_eq!(got.len(), 1);
        let run = task_named(&s.plan_get(id).await.unwrap(), "held")
            .run_id
            .unwrap();
        let beside = t0.plus(5 * SECOND);
        let stamp = stamp_sql(kind, beside);
        db.execute(&format!(
            "INSERT INTO held_run_heartbeat (run_id, deadline) VALUES ({run}, {stamp})"
        ))
        .await;

        let t1 = t0.plus(3 * SECOND);
        s.replica_upsert(&replica("r-1", &[]), t1).await.unwrap();
        let report = s.run_sweep(10 * SECOND, None, t1).await.unwrap();
        assert!(report.failed.is_empty(), "{report:?}");

        let t2 = t0.plus(6 * SECOND);
        s.replica_upsert(&replica("r-1", &[]), t2).await.unwrap();
        let report = s.run_sweep(10 * SECOND, None, t2).await.unwrap();
        let cause = format!(
            "run heartbeat missed: replica r-1 did not extend it past {}",
            beside.clock()
        );
        assert_eq!(report.failed, [(run, cause)]);
        let left = "SELECT COUNT(*) FROM held_run_heartbeat";
        assert_eq!(db.count(left).await, 1, "the run was RUNNING at the sweep");
        s.run_sweep(10 * SECOND, None, t2).await.unwrap();
        assert_eq!(db.count(left).await, 0, "the run has ended");
    }

    /// The same for a replica's row (`held_replica_heartbeat`): the
    /// replica is stale only once both stamps are, the cause names the
    /// later, and the record goes with the replica's row.
    pub async fn a_replica_beat_recorded_beside_its_held_row_keeps_it_live(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = Ts::now();
        submit(
            s.as_ref(),
            json!({"name": "p", "tasks": [{"name": "t", "target": "a", "sleep": "1h"}]}),
        )
        .await;
        promote(s.as_ref()).await;
        s.replica_upsert(&replica("r-1", &[]), t0).await.unwrap();
        let got = s.run_claim_many(&claim("r-1", &[], 1), t0).await.unwrap();
        let run = got[0].id;
        let beside = t0.plus(8 * SECOND);
        held_replica_beat(&db, kind, "r-1", beside).await;
        let t1 = t0.plus(12 * SECOND);
        s.run_heartbeat_many("r-1", &[(run, 60 * SECOND)], t1)
            .await
            .unwrap();
        let report = s.run_sweep(10 * SECOND, None, t1).await.unwrap();
        assert!(report.failed.is_empty(), "{report:?}");

        let t2 = t0.plus(19 * SECOND);
        let report = s.run_sweep(10 * SECOND, None, t2).await.unwrap();
        let cause = format!("replica r-1 stopped heart-beating at {}", beside.clock());
        assert_eq!(report.failed, [(run, cause)]);
        let left = "SELECT COUNT(*) FROM held_replica_heartbeat";
        assert_eq!(db.count(left).await, 1, "the replica has its row");
        s.replica_delete("r-1").await.unwrap();
        s.run_sweep(10 * SECOND, None, t2).await.unwrap();
        assert_eq!(db.count(left).await, 0, "the replica's row is gone");
    }

    /// Wherever else a replica's liveness is read, the beat recorded
    /// beside its held row counts as the sweeper counts it: the replica
    /// list shows it, the node gate and the pins of AVAILABLE runs see the
    /// replica's labels live, and the hourly prune keeps its row. (They
    /// read the row's own stamp alone before: a live node's pinned runs
    /// lost their pins while an outside client held its row.)
    pub async fn a_replica_beat_recorded_beside_its_held_row_keeps_its_labels_live(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = Ts::now();
        s.replica_upsert(&replica("r-gpu", &["gpu"]), t0)
            .await
            .unwrap();
        let (_, run) = pinned_run_handed_back(s.as_ref(), t0).await;
        let late = t0.plus(120 * SECOND);
        held_replica_beat(&db, kind, "r-gpu", late).await;

        let listed = s.replica_list().await.unwrap();
        assert_eq!(listed[0].last_heartbeat, late, "the later stamp is listed");
        let stale_after = 10 * SECOND;
        let nodes = baton::store::node_labels(s.as_ref(), stale_after, late)
            .await
            .unwrap();
        assert!(nodes.live.contains("gpu"), "{nodes:?}");
        let unpinned = s.run_unpin_stranded(stale_after, late).await.unwrap();
        assert!(unpinned.is_empty(), "a live node's run lost its pin");
        let pruned = s.replica_prune(late.minus(SECOND)).await.unwrap();
        assert_eq!(pruned, 0, "pruned by its row's stamp alone");

        // Once both stamps are old, it is gone as any other replica.
        let later = late.plus(120 * SECOND);
        let unpinned = s.run_unpin_stranded(stale_after, later).await.unwrap();
        assert_eq!(unpinned, vec![run]);
        assert_eq!(s.replica_prune(later).await.unwrap(), 1);
    }

    pub async fn the_sweeper_fails_runs_past_their_deadlines(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = Ts::now();
        let id = submit(
            s.as_ref(),
            json!({"name": "p", "tasks": [
                {"name": "slow", "target": "a", "sleep": "1h", "timeout": "5s"},
                {"name": "quiet", "target": "b", "sleep": "1h", "heartbeat_timeout": "2s"},
            ]}),
        )
        .await;
        promote(s.as_ref()).await;
        s.replica_upsert(&replica("r-1", &[]), t0).await.unwrap();
        assert_eq!(
            s.run_claim_many(&claim("r-1", &[], 2), t0)
                .await
                .unwrap()
                .len(),
            2
        );
        let view = s.plan_get(id).await.unwrap();
        let slow = task_named(&view, "slow").run_id.unwrap();
        let quiet = task_named(&view, "quiet").run_id.unwrap();
        // The replica is alive; "slow" keeps beating, "quiet" does not.
        let t1 = t0.plus(3 * SECOND);
        s.replica_upsert(&replica("r-1", &[]), t1).await.unwrap();
        s.run_heartbeat_many("r-1", &[(slow, 10 * SECOND)], t1)
            .await
            .unwrap();
        let report = s.run_sweep(10 * SECOND, None, t1).await.unwrap();
        assert_eq!(report.failed.len(), 1);
        assert_eq!(report.failed[0].0, quiet);
        assert!(
            report.failed[0]
                .1
                .starts_with("run heartbeat missed: replica r-1")
        );

        let t2 = t0.plus(6 * SECOND);
        s.replica_upsert(&replica("r-1", &[]), t2).await.unwrap();
        s.run_heartbeat_many("r-1", &[(slow, 10 * SECOND)], t2)
            .await
            .unwrap();
        let report = s.run_sweep(10 * SECOND, None, t2).await.unwrap();
        assert_eq!(report.failed.len(), 1);
        assert_eq!(report.failed[0].0, slow);
        assert!(
            report.failed[0].1.starts_with("timed out after 5s"),
            "{:?}",
            report.failed
        );
        assert!(report.retried.is_empty(), "no attempts left");
    }

    pub async fn run_heartbeats_use_each_runs_own_timeout(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = Ts::now();
        submit(
            s.as_ref(),
            json!({"name": "p", "tasks": [
                {"name": "own", "target": "a", "sleep": "1h", "heartbeat_interval": "1s", "heartbeat_timeout": "3s"},
                {"name": "slow-beat", "target": "b", "sleep": "1h", "heartbeat_interval": "8s"},
                {"name": "default", "target": "c", "sleep": "1h"},
            ]}),
        )
        .await;
        promote(s.as_ref()).await;
        let mut got = s.run_claim_many(&claim("r-1", &[], 3), t0).await.unwrap();
        got.sort_by_key(|r| r.id);
        let timeouts: Vec<_> = got
            .iter()
            .map(|r| (r.heartbeat_interval, r.heartbeat_timeout))
            .collect();
        assert_eq!(
            timeouts,
            vec![
                (Some(SECOND), 3 * SECOND),
                // Twice its interval, above the replica default of 10 s.
                (Some(8 * SECOND), 16 * SECOND),
                (None, 10 * SECOND),
            ]
        );
        for r in &got {
            // From the claim's stamp: `t0` plus its wait for the claim lock.
            assert!(r.started_at >= t0);
            let run = s.run_get(r.id).await.unwrap();
            assert_eq!(
                run.heartbeat_deadline,
                Some(r.started_at.plus(r.heartbeat_timeout).0)
            );
        }
        let t1 = t0.plus(SECOND);
        let owned = s
            .run_heartbeat_many("r-1", &[(got[0].id, 3 * SECOND)], t1)
            .await
            .unwrap()
            .owned;
        assert_eq!(owned, vec![got[0].id]);
        let run = s.run_get(got[0].id).await.unwrap();
        assert_eq!(run.heartbeat_deadline, Some(t1.plus(3 * SECOND).0));
        assert_eq!(run.last_heartbeat_at, Some(t1.0));
    }

    pub async fn hand_back_returns_runs_to_available_with_their_attempt(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        submit(
            s.as_ref(),
            json!({"name": "p", "tasks": [{"name": "a", "target": "a", "sleep": "1h"}]}),
        )
        .await;
        promote(s.as_ref()).await;
        let run = s
            .run_claim_many(&claim("r-1", &[], 1), Ts::now())
            .await
            .unwrap()[0]
            .id;
        // Only the owner can hand a run back.
        let back = s
            .run_hand_back_many("r-2", &[run], "not mine", Ts::now())
            .await
            .unwrap();
        assert!(back.is_empty());
        let back = s
            .run_hand_back_many("r-1", &[run], "handed back at shutdown", Ts::now())
            .await
            .unwrap();
        assert_eq!(back, vec![run]);
        let view = s.run_get(run).await.unwrap();
        assert_eq!(view.status, RunStatus::Available);
        assert_eq!((view.attempt, view.replica_id.as_deref()), (1, None));
        let last = view.events.last().unwrap();
        assert_eq!(
            (last.from, last.to),
            (Some(RunStatus::Running), RunStatus::Available)
        );
        assert_eq!(last.detail.as_deref(), Some("handed back at shutdown"));
        // The old owner is fenced out; another replica takes the same run.
        assert!(
            s.run_heartbeat_many("r-1", &[(run, 10 * SECOND)], Ts::now())
                .await
                .unwrap()
                .owned
                .is_empty()
        );
        let again = s
            .run_claim_many(&claim("r-2", &[], 1), Ts::now())
            .await
            .unwrap();
        assert_eq!(again[0].id, run);
        assert_eq!(again[0].attempt, 1);
        let finish = s
            .run_finish_many("r-1", &[done(run)], Ts::now())
            .await
            .unwrap();
        assert_eq!(finish.fenced, vec![run]);
        let finish = s
            .run_finish_many("r-2", &[done(run)], Ts::now())
            .await
            .unwrap();
        assert_eq!(finish.finished, vec![run]);
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
        s.replica_upsert(&replica("r-other", &[]), t0)
            .await
            .unwrap();
        s.plan_insert(&plan(json!({"name": "p", "tasks": [{"name": "a", "target": "x", "sleep": "0s"}, {"name": "b", "target": "y", "sleep": "0s"}, {"name": "c", "target": "z", "sleep": "0s"}]})), "t".into(), Ts::now()).await.unwrap();
        promote(s.as_ref()).await;
        let mine = s
            .run_claim_many(&claim("r-test", &[], 2), Ts::now())
            .await
            .unwrap();
        let theirs = s
            .run_claim_many(&claim("r-other", &[], 5), Ts::now())
            .await
            .unwrap();
        assert_eq!((mine.len(), theirs.len()), (2, 1));
        // Each count is its own replica's, and one with none says 0.
        fn running(list: &[baton::store::ReplicaRecord]) -> Vec<(&str, i64)> {
            let mut counts: Vec<_> = list
                .iter()
                .map(|r| (r.info.replica_id.as_str(), r.running))
                .collect();
            counts.sort();
            counts
        }
        let list = s.replica_list().await.unwrap();
        assert_eq!(
            running(&list),
            [("r-idle", 0), ("r-other", 1), ("r-test", 2)]
        );
        let me = list.iter().find(|r| r.info.replica_id == "r-test").unwrap();
        assert_eq!(me.info.labels, vec!["gpu", "eu"]);
        assert_eq!(me.last_heartbeat, later);
        // A finished run no longer counts.
        s.run_finish_many("r-test", &[done(mine[0].id)], Ts::now())
            .await
            .unwrap();
        let list = s.replica_list().await.unwrap();
        assert_eq!(
            running(&list),
            [("r-idle", 0), ("r-other", 1), ("r-test", 1)]
        );
        s.replica_delete("r-idle").await.unwrap();
        assert_eq!(s.replica_list().await.unwrap().len(), 2);
    }

    pub async fn old_heartbeat_rows_are_pruned(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let now = Ts::now();
        s.replica_upsert(
            &replica("r-old", &["gpu"]),
            now.minus(Duration::from_secs(7200)),
        )
        .await
        .unwrap();
        s.replica_upsert(&replica("r-new", &[]), now).await.unwrap();
        let pruned = s
            .replica_prune(now.minus(baton::loops::PRUNE_AFTER))
            .await
            .unwrap();
        assert_eq!(pruned, 1);
        let left: Vec<_> = s
            .replica_list()
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.info.replica_id)
            .collect();
        assert_eq!(left, vec!["r-new"]);
    }

    /// An operator's drain (docs/agents.md, "Draining"): the worker's
    /// next heartbeat reads it back, its labels stop counting as live
    /// (an AVAILABLE run pinned to them loses its pin after
    /// `reassign_after`, as from a dead worker), a second drain and a
    /// resume of a worker not draining are refused and audited, an
    /// unknown worker is answered as such, and a resume undoes it all.
    pub async fn a_drained_worker_is_told_and_its_labels_count_as_gone(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let ops = domain::audit::Person::from("ops");
        let t0 = Ts::now();
        assert!(
            !s.replica_upsert(&replica("r-gpu", &["gpu"]), t0)
                .await
                .unwrap()
        );
        assert!(s.replicas_draining().await.unwrap().is_empty());
        assert!(!s.replica_drain("r-nobody", true, ops, t0).await.unwrap());
        assert!(s.replicas_draining().await.unwrap().is_empty());

        // A pinned run promoted and handed back while r-gpu is alive.
        let (_, run) = pinned_run_handed_back(s.as_ref(), t0).await;

        assert!(s.replica_drain("r-gpu", true, ops, t0).await.unwrap());
        let late = t0.plus(120 * SECOND);
        assert!(
            s.replica_upsert(&replica("r-gpu", &["gpu"]), late)
                .await
                .unwrap()
        );
        assert_eq!(s.replicas_draining().await.unwrap(), vec!["r-gpu"]);
        let listed = s.replica_list().await.unwrap();
        let (since, by) = listed[0].draining.clone().expect("listed as draining");
        assert_eq!((since, by.as_str()), (t0, "ops"));
        let again = s.replica_drain("r-gpu", true, ops, late).await.unwrap_err();
        assert!(again.to_string().contains("already draining"), "{again}");
        assert!(again.to_string().contains("by ops"), "{again}");

        // Alive but drained: the pin lapses after `reassign_after`.
        let unpinned = s.run_unpin_stranded(10 * SECOND, late).await.unwrap();
        assert_eq!(unpinned, vec![run]);

        assert!(s.replica_drain("r-gpu", false, ops, late).await.unwrap());
        assert!(
            !s.replica_upsert(&replica("r-gpu", &["gpu"]), late)
                .await
                .unwrap()
        );
        assert!(s.replica_list().await.unwrap()[0].draining.is_none());
        assert!(s.replicas_draining().await.unwrap().is_empty());
        let not = s
            .replica_drain("r-gpu", false, ops, late)
            .await
            .unwrap_err();
        assert!(not.to_string().contains("is not draining"), "{not}");

        let audit = s
            .audit_list(&Default::default(), None, 50)
            .await
            .unwrap()
            .entries;
        let seen: Vec<(String, String, String)> = audit
            .iter()
            .rev()
            .filter(|e| e.action.starts_with("worker."))
            .map(|e| {
                (
                    e.action.clone(),
                    format!("{:?}", e.outcome),
                    e.subject.clone(),
                )
            })
            .collect();
        let worker = "worker r-gpu".to_owned();
        assert_eq!(
            seen,
            vec![
                ("worker.drain".into(), "Done".into(), worker.clone()),
                ("worker.drain".into(), "Refused".into(), worker.clone()),
                ("worker.resume".into(), "Done".into(), worker.clone()),
                ("worker.resume".into(), "Refused".into(), worker),
            ]
        );
    }

    /// A replica whose first heartbeat meets a lock another client holds
    /// (SQLite's write lock; a lock on PostgreSQL's replica table) waits
    /// for it and then starts, where it gave up after the heartbeat's
    /// short wait and never started (a fleet started in the conformance
    /// suite on a loaded machine failed that way).
    pub async fn a_replica_starting_under_an_outside_lock_waits_for_it(kind: Kind) {
        let db = TestDb::new(kind).await;
        let store = db.store().await;
        let release = match kind {
            Kind::Sqlite => held::<sqlx::SqliteConnection>(db.url(), "BEGIN IMMEDIATE").await,
            Kind::Postgres => {
                let lock = "BEGIN; LOCK TABLE replica IN EXCLUSIVE MODE";
                held::<sqlx::PgConnection>(db.url(), lock).await
            }
        };
        let shutdown = tokio_util::sync::CancellationToken::new();
        let starting = tokio::spawn({
            let store = store.clone();
            let shutdown = shutdown.clone();
            async move {
                baton::loops::Replica::start(
                    store,
                    replica("r-late", &[]),
                    baton::loops::SchedulerConfig::default(),
                    baton::executor::Registry::builtin(),
                    shutdown,
                )
                .await
            }
        });
        // Many times the heartbeat's own wait for a lock.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(!starting.is_finished(), "it waits for the lock");
        release.await;
        let replica = tokio::time::timeout(Duration::from_secs(10), starting)
            .await
            .expect("started once the lock went")
            .unwrap()
            .expect("started");
        let listed = store.replica_list().await.unwrap();
        assert!(
            listed.iter().any(|r| r.info.replica_id == "r-late"),
            "{listed:?}"
        );
        shutdown.cancel();
        replica.join().await.expect("no loop panicked");
    }
    /// What a replica's heartbeat sees of the database's trouble reaches
    /// its sweeper, should it lead (`loops/write_trouble.rs`): a beat held
    /// up by an outside lock makes the next round write off the stretch
    /// since the last round that judged. A replica that takes the lease
    /// once the database is back has seen the outage only that way.
    pub async fn a_heartbeat_held_up_by_a_lock_is_trouble_the_sweeper_discounts(kind: Kind) {
        use baton::loops::{DatabaseLedger, LeaderLease, ReplicaHeartbeat, Sweeper, WriteTrouble};
        let db = TestDb::new(kind).await;
        let store = db.store().await;
        let trouble = WriteTrouble::default();
        let heartbeat = ReplicaHeartbeat::new(
            DatabaseLedger::over(store.clone()),
            replica("r-me", &[]),
            SECOND,
        )
        .noting_trouble(trouble.clone());
        let (_, leadership) = LeaderLease::new(store.clone(), "r-me".into(), 6 * SECOND);
        let mut sweeper = Sweeper::new(store.clone(), leadership, SECOND, 10 * SECOND)
            .noting_trouble(trouble.clone());

        heartbeat.run_once().await.unwrap();
        let report = sweeper.run_once().await.unwrap();
        assert_eq!((trouble.latest(), report.written_off), (None, None));

        let release = match kind {
            Kind::Sqlite => held::<sqlx::SqliteConnection>(db.url(), "BEGIN IMMEDIATE").await,
            Kind::Postgres => {
                let lock = "BEGIN; LOCK TABLE replica IN EXCLUSIVE MODE";
                held::<sqlx::PgConnection>(db.url(), lock).await
            }
        };
        let beat = heartbeat.run_once().await;
        release.await;
        assert!(beat.is_err_and(|e| e.is_lock_wait()), "held up by the lock");
        assert!(trouble.latest().is_some(), "the held-up beat is noted");
        let report = sweeper.run_once().await.unwrap();
        assert!(report.written_off.is_some(), "{report:?}");
    }
}

/// Runs `lock` (which begins a transaction) on a connection of its own to
/// `url`, as another client would; the lock is held until the returned
/// future commits it.
async fn held<C>(url: &str, lock: &'static str) -> futures_util::future::LocalBoxFuture<'static, ()>
where
    C: sqlx::Connection + 'static,
    for<'c> &'c mut C: sqlx::Executor<'c, Database = C::Database>,
{
    use futures_util::FutureExt;
    let mut outside = C::connect(url).await.unwrap();
    sqlx::raw_sql(lock).execute(&mut outside).await.unwrap();
    async move {
        sqlx::raw_sql("COMMIT").execute(&mut outside).await.unwrap();
    }
    .boxed_local()
}
