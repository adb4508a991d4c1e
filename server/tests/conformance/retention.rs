//! Retention on SQLite and PostgreSQL: a finished plan unchanged since the
//! cutoff goes with everything of its own and leaves no orphan row; an
//! open, queued, recently changed plan, or one with a webhook still to
//! send, stays; an action that comes first keeps the plan, one that comes
//! later finds it gone; prunes racing retries never leave half a plan.

use std::sync::Arc;
use std::time::Duration;

use baton::store::submission::{IdempotencyKey, Submitted};
use baton::store::{DeliveryOutcome, LogLine, NotifyTargets, Store, StoreError};
use domain::time::Ts;
use serde_json::json;

use crate::common::store::{claim, done, failed, promote};
use crate::common::{Kind, TestDb, plan};
use crate::{newest_plan, per_backend};

per_backend!(cases:
    finished_plans_go_with_everything_of_theirs,
    open_recent_queued_and_undelivered_plans_stay,
    an_action_first_keeps_the_plan_one_after_finds_it_gone,
    the_search_pages_through_every_old_plan,
    prunes_racing_retries_never_leave_half_a_plan,
    ids_keep_growing_after_a_prune,
    a_keyed_plan_stays_while_its_key_stands,
    a_plan_that_halts_a_version_line_stays,
);

const MINUTE: Duration = Duration::from_secs(60);

/// Promotes and claims everything AVAILABLE as `r-test` at `now`.
async fn claim_all(s: &dyn Store, now: Ts) -> Vec<i64> {
    promote(s).await;
    let claimed = s
        .run_claim_many(&claim("r-test", &[], 1000), now)
        .await
        .unwrap();
    claimed.iter().map(|c| c.id).collect()
}

/// Rows that would outlive their plan if a prune missed them: each
/// table's rows whose owner is gone.
const ORPHANS: &[(&str, &str)] = &[
    (
        "tasks",
        "SELECT COUNT(*) FROM task t WHERE NOT EXISTS (SELECT 1 FROM plan p WHERE p.id = t.plan_id)",
    ),
    (
        "runs",
        "SELECT COUNT(*) FROM task_run r WHERE NOT EXISTS (SELECT 1 FROM task t WHERE t.id = r.task_id)
            OR NOT EXISTS (SELECT 1 FROM plan p WHERE p.id = r.plan_id)",
    ),
    (
        "events",
        "SELECT COUNT(*) FROM run_event e WHERE NOT EXISTS (SELECT 1 FROM task_run r WHERE r.id = e.run_id)",
    ),
    (
        "logs",
        "SELECT COUNT(*) FROM run_log l WHERE NOT EXISTS (SELECT 1 FROM task_run r WHERE r.id = l.run_id)",
    ),
    (
        "dependencies",
        "SELECT COUNT(*) FROM task_dependency d WHERE NOT EXISTS (SELECT 1 FROM task t WHERE t.id = d.task_id)
            OR NOT EXISTS (SELECT 1 FROM task t WHERE t.id = d.depends_on)",
    ),
    (
        "deliveries",
        "SELECT COUNT(*) FROM delivery d WHERE NOT EXISTS (SELECT 1 FROM plan p WHERE p.id = d.plan_id)",
    ),
    (
        "delivery attempts",
        "SELECT COUNT(*) FROM delivery_attempt a WHERE NOT EXISTS (SELECT 1 FROM delivery d WHERE d.id = a.delivery_id)",
    ),
    (
        "notification claims",
        "SELECT COUNT(*) FROM notification_claim c WHERE NOT EXISTS (SELECT 1 FROM plan p WHERE p.id = c.plan_id)",
    ),
];

async fn assert_no_orphans(db: &TestDb) {
    for (what, sql) in ORPHANS {
        assert_eq!(db.count(sql).await, 0, "{what} left without their owner");
    }
}

mod cases {
    use super::*;

    pub async fn finished_plans_go_with_everything_of_theirs(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        s.notify_targets_set(NotifyTargets {
            webhook_url: Some("http://ops.example/hook".into()),
            public_url: "http://baton.example".into(),
        });
        let t0 = Ts::now();
        // A plan with a dependency, a log, a failed first attempt retried
        // to DONE, and a delivered notification.
        let done_plan = s
            .plan_insert(
                &plan(json!({"name": "done", "tasks": [
                    {"name": "a", "target": "x", "sleep": "0s"},
                    {"name": "b", "target": "y", "sleep": "0s", "depends_on": ["a"]},
                ]})),
                "t".into(),
                t0,
            )
            .await
            .unwrap();
        let a = claim_all(s.as_ref(), t0).await;
        assert_eq!(a.len(), 1);
        s.run_log_append(
            "r-test",
            a[0],
            &[LogLine {
                at: t0,
                stream: "stdout",
                line: "migrating".into(),
            }],
        )
        .await
        .unwrap();
        s.run_finish_many("r-test", &[failed(a[0])], t0)
            .await
            .unwrap();
        let view = s.plan_get(done_plan).await.unwrap();
        s.task_retry(view.tasks[0].id, "ops".into(), t0)
            .await
            .unwrap();
        let a2 = claim_all(s.as_ref(), t0).await;
        s.run_finish_many("r-test", &[done(a2[0])], t0)
            .await
            .unwrap();
        let b = claim_all(s.as_ref(), t0).await;
        s.run_finish_many("r-test", &[done(b[0])], t0)
            .await
            .unwrap();
        // Deliver every notification so none is pending.
        for d in s
            .delivery_take_due("r-test", 50, MINUTE, t0.plus(MINUTE * 60))
            .await
            .unwrap()
        {
            let ok = DeliveryOutcome {
                status_code: Some(200),
                error: None,
                retry_at: None,
            };
            s.delivery_record("r-test", &d, &ok, t0).await.unwrap();
        }
        assert!(
            !s.delivery_list(Some(done_plan), 10)
                .await
                .unwrap()
                .is_empty()
        );
        // A plan that failed and stays failed.
        let failed_plan = s
            .plan_insert(
                &plan(json!({"name": "failed", "webhooks": [], "tasks": [{"name": "a", "target": "z", "sleep": "0s"}]})),
                "t".into(),
                t0,
            )
            .await
            .unwrap();
        let f = claim_all(s.as_ref(), t0).await;
        s.run_finish_many("r-test", &[failed(f[0])], t0)
            .await
            .unwrap();
        for d in s
            .delivery_take_due("r-test", 50, MINUTE, t0.plus(MINUTE * 60))
            .await
            .unwrap()
        {
            let gave_up = DeliveryOutcome {
                status_code: Some(500),
                error: Some("gave up".into()),
                retry_at: None,
            };
            s.delivery_record("r-test", &d, &gave_up, t0).await.unwrap();
        }
        // One that is still running.
        let running = s
            .plan_insert(
                &plan(json!({"name": "running", "tasks": [{"name": "a", "target": "w", "sleep": "0s"}]})),
                "t".into(),
                t0,
            )
            .await
            .unwrap();
        claim_all(s.as_ref(), t0).await;

        // Nothing is older than a cutoff before it all happened.
        let before = s
            .plan_prune_scan(t0.minus(MINUTE), None, 100)
            .await
            .unwrap();
        assert!(before.prunable.is_empty() && before.next.is_none());
        // A cutoff after it: the two finished plans may go.
        let cutoff = Ts::now().plus(MINUTE);
        let scan = s.plan_prune_scan(cutoff, None, 100).await.unwrap();
        let found: Vec<i64> = scan.prunable.iter().map(|p| p.plan_id).collect();
        assert_eq!(found, [done_plan, failed_plan]);
        let report = s.plan_prune(&found, cutoff).await.unwrap();
        assert_eq!(
            (report.plans, report.tasks, report.runs),
            (2, 3, 4),
            "both plans, their three tasks, four runs (one an earlier attempt)"
        );
        assert!(report.events >= 4 * 3, "{report:?}");
        assert_eq!(report.logs, 1);
        assert!(report.deliveries >= 2, "{report:?}");
        for gone in [done_plan, failed_plan] {
            assert!(matches!(
                s.plan_get(gone).await,
                Err(StoreError::NotFound { .. })
            ));
            assert!(s.delivery_list(Some(gone), 10).await.unwrap().is_empty());
        }
        assert_eq!(s.plan_get(running).await.unwrap().tasks.len(), 1);
        assert_no_orphans(&db).await;
        db.assert_open_task_counts().await;
        // Pruning the same ids again deletes nothing.
        assert_eq!(
            s.plan_prune(&found, cutoff).await.unwrap(),
            Default::default()
        );
    }

    pub async fn open_recent_queued_and_undelivered_plans_stay(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = Ts::now();
        let one = |name: &str, target: &str| {
            plan(json!({"name": name, "tasks": [{"name": "a", "target": target, "sleep": "0s"}]}))
        };
        let not_started = s
            .plan_insert(
                &plan(json!({"name": "later", "start": false, "tasks": [{"name": "a", "target": "n", "sleep": "0s"}]})),
                "t".into(),
                t0,
            )
            .await
            .unwrap();
        let pending = s
            .plan_insert(&one("pending", "p"), "t".into(), t0)
            .await
            .unwrap();
        s.plan_pause(pending, "ops".into(), t0).await.unwrap();
        // Failed at t0, skipped ten minutes later: changed then.
        let skipped = s
            .plan_insert(&one("skipped", "k"), "t".into(), t0)
            .await
            .unwrap();
        let runs = claim_all(s.as_ref(), t0).await;
        s.run_finish_many("r-test", &[failed(runs[0])], t0)
            .await
            .unwrap();
        let task = s.plan_get(skipped).await.unwrap().tasks[0].id;
        s.task_skip(task, "ops".into(), t0.plus(MINUTE * 10))
            .await
            .unwrap();
        // Done, with its notification still to deliver.
        s.notify_targets_set(NotifyTargets {
            webhook_url: Some("http://ops.example/hook".into()),
            public_url: "http://baton.example".into(),
        });
        let undelivered = s
            .plan_insert(&one("undelivered", "u"), "t".into(), t0)
            .await
            .unwrap();
        let runs = claim_all(s.as_ref(), t0).await;
        s.run_finish_many("r-test", &[done(runs[0])], t0)
            .await
            .unwrap();
        assert!(
            !s.delivery_list(Some(undelivered), 10)
                .await
                .unwrap()
                .is_empty()
        );

        let cutoff = t0.plus(MINUTE * 5);
        let scan = s.plan_prune_scan(cutoff, None, 100).await.unwrap();
        assert!(scan.prunable.is_empty(), "{:?}", scan.prunable);
        // Asked to delete them anyway, the re-check refuses every one.
        let all = [not_started, pending, skipped, undelivered];
        assert_eq!(s.plan_prune(&all, cutoff).await.unwrap().plans, 0);
        for id in all {
            s.plan_get(id).await.unwrap();
        }
        // Once the skip is older than the cutoff, that plan goes.
        let later = t0.plus(MINUTE * 11).max(Ts::now().plus(MINUTE));
        let scan = s.plan_prune_scan(later, None, 100).await.unwrap();
        let found: Vec<i64> = scan.prunable.iter().map(|p| p.plan_id).collect();
        assert_eq!(found, [skipped]);
        assert_eq!(s.plan_prune(&all, later).await.unwrap().plans, 1);
        assert_no_orphans(&db).await;
    }

    pub async fn an_action_first_keeps_the_plan_one_after_finds_it_gone(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = Ts::now();
        let mut plans = Vec::new();
        for name in ["first", "second"] {
            let id = s
                .plan_insert(
                    &plan(json!({"name": name, "tasks": [{"name": "a", "target": name, "sleep": "0s"}]})),
                    "t".into(),
                    t0,
                )
                .await
                .unwrap();
            plans.push(id);
        }
        newest_plan(s.as_ref()).await;
        let runs = claim_all(s.as_ref(), t0).await;
        let finishes: Vec<_> = runs.iter().map(|&r| failed(r)).collect();
        s.run_finish_many("r-test", &finishes, t0).await.unwrap();
        let cutoff = Ts::now().plus(MINUTE);
        let scan = s.plan_prune_scan(cutoff, None, 100).await.unwrap();
        assert_eq!(scan.prunable.len(), 2);
        // The operator retries the first plan between the search and the
        // deletion: its new attempt is PENDING, so it stays.
        let first_task = s.plan_get(plans[0]).await.unwrap().tasks[0].id;
        s.task_retry(first_task, "ops".into(), Ts::now())
            .await
            .unwrap();
        let report = s.plan_prune(&plans, cutoff).await.unwrap();
        assert_eq!(report.plans, 1);
        assert_eq!(
            s.plan_get(plans[0]).await.unwrap().tasks[0].attempt,
            Some(2)
        );
        // The second is gone: acting on it is "not found", not a change.
        let second_task = s.plan_get(plans[1]).await;
        assert!(matches!(second_task, Err(StoreError::NotFound { .. })));
        assert!(matches!(
            s.plan_retry(plans[1], "ops".into(), Ts::now()).await,
            Err(StoreError::NotFound { .. })
        ));
        assert_no_orphans(&db).await;
        db.assert_open_task_counts().await;
    }

    pub async fn the_search_pages_through_every_old_plan(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = Ts::now();
        let mut ids = Vec::new();
        // Seven plans, two sharing one created_at: the cursor must not
        // skip or repeat either.
        for i in 0..7 {
            let at = if i == 3 {
                t0.plus(MINUTE * 2)
            } else {
                t0.plus(MINUTE * i)
            };
            let p = plan(
                json!({"name": format!("p{i}"), "tasks": [{"name": "a", "target": format!("x{i}"), "sleep": "0s"}]}),
            );
            ids.push(s.plan_insert(&p, "t".into(), at).await.unwrap());
        }
        let runs = claim_all(s.as_ref(), t0).await;
        let finishes: Vec<_> = runs.iter().map(|&r| done(r)).collect();
        s.run_finish_many("r-test", &finishes, t0.plus(MINUTE * 7))
            .await
            .unwrap();
        let cutoff = t0.plus(MINUTE * 8);
        let mut seen = Vec::new();
        let mut from = None;
        let mut pages = 0;
        loop {
            let scan = s.plan_prune_scan(cutoff, from, 2).await.unwrap();
            seen.extend(scan.prunable.iter().map(|p| p.plan_id));
            pages += 1;
            match scan.next {
                Some(next) => from = Some(next),
                None => break,
            }
        }
        // The newest plan holds the highest plan, task and run ids, and
        // stays (`ids_keep_growing_after_a_prune`).
        let mut expected = ids[..6].to_vec();
        // Oldest first: p3 shares p2's time and has the larger id.
        expected.sort_by_key(|&id| {
            let i = ids.iter().position(|&x| x == id).unwrap() as i64;
            (if i == 3 { 2 } else { i }, id)
        });
        assert_eq!(seen, expected);
        assert_eq!(pages, 4, "6 plans, 2 per page: the last page is empty");
        // A cutoff between creations stops the search at the older plans.
        let scan = s
            .plan_prune_scan(t0.plus(MINUTE * 2), None, 100)
            .await
            .unwrap();
        assert!(scan.prunable.is_empty(), "their runs finished later");
        // One transaction never takes more than a bounded batch.
        let too_many = vec![ids[0]; 501];
        assert!(matches!(
            s.plan_prune(&too_many, cutoff).await,
            Err(StoreError::Invalid(m)) if m.contains("501")
        ));
        s.plan_get(ids[0]).await.unwrap();
    }

    pub async fn prunes_racing_retries_never_leave_half_a_plan(kind: Kind) {
        const PLANS: usize = 40;
        const TASKS: usize = 5;
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = Ts::now();
        let mut ids = Vec::new();
        for p in 0..PLANS {
            let tasks: Vec<_> = (0..TASKS)
                .map(|t| json!({"name": format!("t{t}"), "target": format!("x{p}-{t}"), "sleep": "0s"}))
                .collect();
            let json = json!({"name": format!("p{p}"), "tasks": tasks});
            ids.push(s.plan_insert(&plan(json), "t".into(), t0).await.unwrap());
        }
        newest_plan(s.as_ref()).await;
        let runs = claim_all(s.as_ref(), t0).await;
        assert_eq!(runs.len(), PLANS * TASKS);
        // The first task of every plan fails; the rest are DONE.
        let finishes: Vec<_> = runs
            .iter()
            .enumerate()
            .map(|(i, &r)| if i % TASKS == 0 { failed(r) } else { done(r) })
            .collect();
        s.run_finish_many("r-test", &finishes, t0).await.unwrap();
        let mut failed_tasks = Vec::new();
        for &id in &ids {
            failed_tasks.push(s.plan_get(id).await.unwrap().tasks[0].id);
        }
        let cutoff = Ts::now().plus(MINUTE);
        // Two pruners a plan at a time, against eight operators retrying
        // the failed tasks of the even plans, all at once; nobody touches
        // the odd plans, which must go.
        let mut racers = tokio::task::JoinSet::new();
        for k in 0..2usize {
            let s: Arc<dyn Store> = s.clone();
            let mut mine = ids.clone();
            if k == 1 {
                mine.reverse();
            }
            racers.spawn(async move {
                for id in mine {
                    s.plan_prune(&[id], cutoff).await.unwrap();
                }
            });
        }
        for k in 0..8usize {
            let s: Arc<dyn Store> = s.clone();
            let tasks: Vec<i64> = failed_tasks
                .iter()
                .copied()
                .step_by(2)
                .skip(k)
                .step_by(8)
                .collect();
            racers.spawn(async move {
                for task in tasks {
                    match s.task_retry(task, "ops".into(), Ts::now()).await {
                        Ok(_) | Err(StoreError::NotFound { .. }) => {}
                        Err(e) => panic!("retry of task {task}: {e}"),
                    }
                }
            });
        }
        while let Some(r) = racers.join_next().await {
            r.unwrap();
        }
        // Each plan is either whole, with its retried attempt, or gone;
        // an odd one is gone.
        let mut kept = 0;
        for (i, &id) in ids.iter().enumerate() {
            match s.plan_get(id).await {
                Ok(view) => {
                    assert_eq!(i % 2, 0, "plan {id}: nobody retried it, yet it was kept");
                    kept += 1;
                    assert_eq!(view.tasks.len(), TASKS, "plan {id} lost tasks");
                    assert_eq!(
                        view.tasks[0].attempt,
                        Some(2),
                        "plan {id} kept without its retry"
                    );
                }
                Err(StoreError::NotFound { .. }) => {}
                Err(e) => panic!("plan {id}: {e}"),
            }
        }
        assert_no_orphans(&db).await;
        if kept > 0 {
            db.assert_open_task_counts().await;
        }
        // The kept plans have a PENDING run: nothing more may go.
        let scan = s.plan_prune_scan(cutoff, None, 100).await.unwrap();
        assert!(scan.prunable.is_empty());
    }

    /// SQLite numbers a new row after the highest id there is; pruning
    /// the newest plans handed their plan, task and run ids out again, and
    /// with them the fencing token (`BATON_FENCING_TOKEN`, the run id) a
    /// target had already seen. The plans holding a highest id stay.
    pub async fn ids_keep_growing_after_a_prune(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = Ts::now();
        let one = |name: &str| {
            plan(json!({"name": name, "tasks": [{"name": "a", "target": name, "sleep": "0s"}]}))
        };
        let old = s.plan_insert(&one("old"), "t".into(), t0).await.unwrap();
        let newest = s.plan_insert(&one("newest"), "t".into(), t0).await.unwrap();
        let runs = claim_all(s.as_ref(), t0).await;
        let finishes: Vec<_> = runs.iter().map(|&r| failed(r)).collect();
        s.run_finish_many("r-test", &finishes, t0).await.unwrap();
        // The old plan's retry now holds the highest run id.
        let task = s.plan_get(old).await.unwrap().tasks[0].id;
        s.task_retry(task, "ops".into(), t0).await.unwrap();
        let retry = claim_all(s.as_ref(), t0).await;
        s.run_finish_many("r-test", &[done(retry[0])], t0)
            .await
            .unwrap();
        let highest_run = *runs.iter().chain(&retry).max().unwrap();

        let cutoff = Ts::now().plus(MINUTE);
        let scan = s.plan_prune_scan(cutoff, None, 100).await.unwrap();
        assert!(scan.prunable.is_empty(), "{:?}", scan.prunable);
        assert_eq!(s.plan_prune(&[old, newest], cutoff).await.unwrap().plans, 0);

        // Newer plans free the old ones; ids only ever grow.
        let next = s.plan_insert(&one("next"), "t".into(), t0).await.unwrap();
        let next_run = claim_all(s.as_ref(), t0).await;
        s.run_finish_many("r-test", &[done(next_run[0])], t0)
            .await
            .unwrap();
        let scan = s.plan_prune_scan(cutoff, None, 100).await.unwrap();
        let found: Vec<i64> = scan.prunable.iter().map(|p| p.plan_id).collect();
        assert_eq!(found, [old, newest]);
        assert_eq!(s.plan_prune(&found, cutoff).await.unwrap().plans, 2);
        let after = s.plan_insert(&one("after"), "t".into(), t0).await.unwrap();
        let after_run = claim_all(s.as_ref(), t0).await;
        assert!(after > next && next > newest, "{after} {next} {newest}");
        assert!(after_run[0] > next_run[0] && next_run[0] > highest_run);
        assert_no_orphans(&db).await;
    }

    /// Retention shorter than a day must not break the idempotency
    /// promise: a client may repeat a keyed submit for 24 hours and get
    /// the plan it made, so that plan is kept while its key stands; once
    /// the key has lapsed it goes like any other.
    pub async fn a_keyed_plan_stays_while_its_key_stands(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let hour = MINUTE * 60;
        let (lapsed_at, recent) = (Ts::now().minus(hour * 25), Ts::now().minus(hour));
        let one = |name: &str| {
            plan(json!({"name": name, "tasks": [{"name": "a", "target": name, "sleep": "0s"}]}))
        };
        let keyed = |key: &'static str| IdempotencyKey {
            key,
            body_sha256: "0".repeat(64),
        };
        let lapsed = match s
            .plan_insert_keyed(
                &one("lapsed-key"),
                "t".into(),
                lapsed_at,
                &keyed("k-lapsed"),
            )
            .await
            .unwrap()
        {
            Submitted::Created(id) => id,
            other => panic!("{other:?}"),
        };
        let standing = match s
            .plan_insert_keyed(
                &one("standing-key"),
                "t".into(),
                recent,
                &keyed("k-standing"),
            )
            .await
            .unwrap()
        {
            Submitted::Created(id) => id,
            other => panic!("{other:?}"),
        };
        let plain = s
            .plan_insert(&one("plain"), "t".into(), recent)
            .await
            .unwrap();
        let runs = claim_all(s.as_ref(), recent).await;
        let finishes: Vec<_> = runs.iter().map(|&r| done(r)).collect();
        s.run_finish_many("r-test", &finishes, recent)
            .await
            .unwrap();
        // Holds the highest ids, so the three above may go by id.
        newest_plan(s.as_ref()).await;

        // Retention of a minute: everything above is past it.
        let cutoff = Ts::now().minus(MINUTE);
        let scan = s.plan_prune_scan(cutoff, None, 100).await.unwrap();
        let mut found: Vec<i64> = scan.prunable.iter().map(|p| p.plan_id).collect();
        found.sort();
        assert_eq!(found, [lapsed, plain], "the standing key's plan is kept");
        // The prune's own re-check keeps it too, if asked by id.
        let report = s
            .plan_prune(&[lapsed, standing, plain], cutoff)
            .await
            .unwrap();
        assert_eq!(report.plans, 2);
        assert!(s.plan_get(standing).await.is_ok());
        // The client's retry gets its plan, not a second one.
        let again = s
            .plan_insert_keyed(
                &one("standing-key"),
                "t".into(),
                Ts::now(),
                &keyed("k-standing"),
            )
            .await
            .unwrap();
        assert_eq!(again, Submitted::Replayed(standing));
        assert_no_orphans(&db).await;
    }

    /// A failed versioned task halts every larger version of its target
    /// until an operator retries or skips it; pruning its plan must not be
    /// what lifts the halt. An unversioned failure halts nothing and goes.
    pub async fn a_plan_that_halts_a_version_line_stays(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = Ts::now().minus(MINUTE * 60);
        let halting = s
            .plan_insert(
                &plan(
                    json!({"name": "m41", "tasks": [{"name": "m", "target": "ret/x",
                    "version": "0041", "sleep": "0s"}]}),
                ),
                "t".into(),
                t0,
            )
            .await
            .unwrap();
        let plain = s
            .plan_insert(
                &plan(json!({"name": "plain", "tasks": [{"name": "m", "target": "ret/y", "sleep": "0s"}]})),
                "t".into(),
                t0,
            )
            .await
            .unwrap();
        let runs = claim_all(s.as_ref(), t0).await;
        let finishes: Vec<_> = runs.iter().map(|&r| failed(r)).collect();
        s.run_finish_many("r-test", &finishes, t0).await.unwrap();
        newest_plan(s.as_ref()).await;

        let cutoff = Ts::now().minus(MINUTE);
        let scan = s.plan_prune_scan(cutoff, None, 100).await.unwrap();
        let found: Vec<i64> = scan.prunable.iter().map(|p| p.plan_id).collect();
        assert_eq!(found, [plain], "the halting plan is kept");
        assert_eq!(
            s.plan_prune(&[halting, plain], cutoff).await.unwrap().plans,
            1
        );
        // Skipped, the halt is lifted by the operator; the plan may go
        // once the skip is older than the cutoff.
        let task = s.plan_get(halting).await.unwrap().tasks[0].id;
        s.task_skip(task, "ops".into(), t0).await.unwrap();
        let scan = s.plan_prune_scan(cutoff, None, 100).await.unwrap();
        let found: Vec<i64> = scan.prunable.iter().map(|p| p.plan_id).collect();
        assert_eq!(found, [halting]);
        assert_no_orphans(&db).await;
    }
}
