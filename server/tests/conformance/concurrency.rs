//! The store under real concurrency, on both backends: eight claimers never
//! share a run, eight promoters keep every gate (dependencies, capacity,
//! pauses and halts included), racing retries make exactly one new attempt
//! each. And invariants 1–3 (docs/design.md) end to end: eight replicas
//! (each its own pool and id, all loops running) work through 600 short
//! runs over 24 targets with versions, dependencies, exclusive and shared
//! tasks, plan limits and capped targets; the event history must show no
//! overlap on an exclusive target, no plan above its limit, versions in
//! order, no dependent before its dependencies, no capped target over
//! capacity, and every run executed exactly once.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use baton::executor::Registry;
use baton::loops::{Replica, SchedulerConfig};
use baton::store::{Store, StoreError};
use domain::gates::NodeLabels;
use domain::model::{PlanStatus, PlanView, TaskStatus};
use domain::time::Ts;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::store::{
    claim, failed, noop_tasks, plan_done, promote, promote_and_claim, replica,
};
use crate::common::{self, Kind, TestDb, eventually, invariants, plan};
use crate::{all_done_then_stop, fleet, per_backend};

per_backend!(cases:
    concurrent_claimers_never_share_a_run,
    claiming_rounds_and_claimers_never_share_a_run,
    concurrent_promoters_respect_the_gates,
    racing_retries_create_one_attempt_each,
    a_racing_action_sees_the_run_the_winner_made,
    eight_replicas_keep_every_invariant,
    racing_promoters_start_no_dependent_early_and_keep_capacity,
    racing_promoters_promote_nothing_paused_or_halted,
    a_replica_stopped_mid_claim_strands_no_run,
    a_replica_never_runs_more_than_its_workers,
    the_leaders_round_starts_what_it_claims_only_for_a_live_replica,
    a_leading_replica_starts_what_its_rounds_promote,
);

/// Counts executions in flight and the most seen at once.
#[derive(Default)]
struct Peak {
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

struct PeakCounted(Arc<Peak>);

#[async_trait::async_trait]
impl baton::executor::Executor for PeakCounted {
    async fn execute(
        &self,
        _: &serde_json::Value,
        _: &baton::executor::RunContext,
    ) -> baton::executor::Outcome {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.0.now.fetch_add(1, SeqCst) + 1;
        self.0.most.fetch_max(now, SeqCst);
        tokio::time::sleep(Duration::from_millis(3)).await;
        self.0.now.fetch_sub(1, SeqCst);
        baton::executor::Outcome::done(None)
    }
}

/// Eight promoters race one round each, while the runs they made
/// AVAILABLE are claimed and finished DONE between rounds, until nothing
/// is left to promote (or `rounds` have passed).
async fn race_to_the_end(db: &TestDb, setup: &dyn Store, rounds: usize) {
    let stores = db.stores(8).await;
    for _ in 0..rounds {
        let racing: Vec<_> = stores
            .iter()
            .map(|store| {
                let store = store.clone();
                tokio::spawn(async move {
                    store
                        .run_promote_round(&NodeLabels::default(), None, Ts::now())
                        .await
                        .expect("round")
                })
            })
            .collect();
        for r in racing {
            r.await.unwrap();
        }
        let claimed = setup
            .run_claim_many(&claim("r-race", &[], 1000), Ts::now())
            .await
            .unwrap();
        if claimed.is_empty() {
            let left = promote(setup).await;
            if left.promoted == 0 {
                return;
            }
            continue;
        }
        let finishes: Vec<_> = claimed.iter().map(|c| common::store::done(c.id)).collect();
        setup
            .run_finish_many("r-race", &finishes, Ts::now())
            .await
            .unwrap();
    }
}

const PLANS: usize = 12;
const TASKS_PER_PLAN: usize = 50;
const TARGETS: usize = 24;

mod cases {
    use super::*;

    pub async fn concurrent_claimers_never_share_a_run(kind: Kind) {
        let db = TestDb::new(kind).await;
        let setup = db.store().await;
        let tasks = noop_tasks(400);
        setup
            .plan_insert(
                &plan(json!({"name": "p", "tasks": tasks})),
                "t".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        assert_eq!(promote(setup.as_ref()).await.promoted, 400);
        // Every store is opened (and migrated) before any claimer starts,
        // and all start together: opening one takes longer than claiming
        // all 400 runs on a busy machine, so a claimer started early could
        // otherwise take every run before the others exist.
        let stores = db.stores(8).await;
        let start = Arc::new(tokio::sync::Barrier::new(stores.len()));
        let mut claimers = Vec::new();
        for (i, store) in stores.into_iter().enumerate() {
            let start = start.clone();
            claimers.push(tokio::spawn(async move {
                let me = format!("r-{i}");
                let mut mine = Vec::new();
                start.wait().await;
                loop {
                    let got = store
                        .run_claim_many(&claim(&me, &[], 7), Ts::now())
                        .await
                        .expect("claim");
                    if got.is_empty() {
                        return mine;
                    }
                    mine.extend(got.into_iter().map(|c| c.id));
                    // Runs what it took before it asks again, as a replica
                    // with its slots full does. Without a pause SQLite's
                    // lock favours whoever just let go: its waiters sleep
                    // and poll, so one claimer took all 400 runs in one of
                    // five tries, and the race this test is about did not
                    // happen.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }));
        }
        let mut seen = HashSet::new();
        let mut shares = Vec::new();
        for c in claimers {
            let mine = c.await.unwrap();
            shares.push(mine.len());
            for id in mine {
                assert!(seen.insert(id), "run {id} claimed twice");
            }
        }
        assert_eq!(seen.len(), 400, "every run claimed once");
        let busy = shares.iter().filter(|&&n| n > 0).count();
        assert!(
            busy >= 2,
            "claims were spread over several claimers: {shares:?}"
        );
    }

    /// Rounds that claim for their replicas (four promoters, as during a
    /// change of leader) race eight claimers while plans keep arriving:
    /// every run is claimed exactly once, and is RUNNING on the replica
    /// whose claim returned it.
    pub async fn claiming_rounds_and_claimers_never_share_a_run(kind: Kind) {
        const PLANS: usize = 20;
        const TASKS: usize = 20;
        let db = TestDb::new(kind).await;
        let setup = db.store().await;
        // Every taker goes on until all runs are taken, whoever took them:
        // one that stopped after a few empty tries could stop while a round
        // was still queueing runs it did not claim itself, and leave them
        // to nobody. A run nobody can take ends the test at the deadline.
        let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut takers = Vec::new();
        for i in 0..12 {
            let store: Arc<dyn Store> = db.store().await;
            let taken = taken.clone();
            takers.push(tokio::spawn(async move {
                let me = format!("r-{i}");
                let mut mine = Vec::new();
                while taken.load(std::sync::atomic::Ordering::SeqCst) < PLANS * TASKS
                    && std::time::Instant::now() < deadline
                {
                    let got: Vec<i64> = if i < 4 {
                        let c = claim(&me, &[], 7);
                        let report = store
                            .run_promote_round(&NodeLabels::default(), Some(&c), Ts::now())
                            .await
                            .expect("round");
                        report.claimed.iter().map(|c| c.id).collect()
                    } else {
                        let got = store
                            .run_claim_many(&claim(&me, &[], 5), Ts::now())
                            .await
                            .expect("claim");
                        got.iter().map(|c| c.id).collect()
                    };
                    taken.fetch_add(got.len(), std::sync::atomic::Ordering::SeqCst);
                    if got.is_empty() {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    mine.extend(got);
                }
                (me, mine)
            }));
        }
        for p in 0..PLANS {
            setup
                .plan_insert(
                    // Targets of their own: nothing here finishes, so a
                    // target shared with another plan would stay taken.
                    &plan(json!({"name": format!("p{p}"), "tasks": (0..TASKS)
                        .map(|i| json!({"name": format!("t{i}"), "target": format!("p{p}-x{i}"), "sleep": "0s"}))
                        .collect::<Vec<_>>()})),
                    "t".into(),
                    Ts::now(),
                )
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut seen = HashSet::new();
        let mut by_rounds = 0;
        let mut by_claimers = 0;
        for (i, t) in takers.into_iter().enumerate() {
            let (me, mine) = t.await.unwrap();
            if i < 4 {
                by_rounds += mine.len();
            } else {
                by_claimers += mine.len();
            }
            for id in mine {
                assert!(seen.insert(id), "run {id} claimed twice");
                let run = setup.run_get(id).await.unwrap();
                assert_eq!(run.replica_id.as_deref(), Some(me.as_str()));
            }
        }
        assert_eq!(seen.len(), PLANS * TASKS, "every run claimed once");
        assert!(
            by_rounds > 0 && by_claimers > 0,
            "both kinds of claim took runs: {by_rounds} by rounds, {by_claimers} by claimers"
        );
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
                    "t".into(),
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
                        .run_promote_round(&NodeLabels::default(), None, Ts::now())
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
    /// Actions that wait for a task's lock behind another must see the run
    /// it made. On PostgreSQL a read that locked as it joined the latest
    /// run kept the run it had joined: four racing Runs of a plan ran its
    /// task four times, and a Skip racing a Retry marked a running task
    /// SKIPPED (hostile trial).
    pub async fn a_racing_action_sees_the_run_the_winner_made(kind: Kind) {
        let db = TestDb::new(kind).await;
        let setup = db.store().await;
        let stores = db.stores(8).await;
        // Retry against Skip of one FAILED task: one of them, never both.
        for round in 0..6 {
            let id = setup
                .plan_insert(
                    &plan(json!({"name": format!("skip-{round}"),
                        "tasks": [{"name": "a", "target": format!("skip-{round}"), "sleep": "0s"}]})),
                    "t".into(),
                    Ts::now(),
                )
                .await
                .unwrap();
            let run = promote_and_claim(setup.as_ref()).await[0];
            setup
                .run_finish_many("r-test", &[failed(run)], Ts::now())
                .await
                .unwrap();
            let task = setup.plan_get(id).await.unwrap().tasks[0].id;
            let racers: Vec<_> = stores
                .iter()
                .enumerate()
                .map(|(i, store)| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        match i % 2 {
                            0 => store
                                .task_retry(task, "racer".into(), Ts::now())
                                .await
                                .map(|_| ()),
                            _ => store
                                .task_skip(task, "racer".into(), Ts::now())
                                .await
                                .map(|_| ()),
                        }
                    })
                })
                .collect();
            let mut went = 0;
            for racer in racers {
                match racer.await.unwrap() {
                    Ok(()) => went += 1,
                    Err(StoreError::Conflict(_)) => {}
                    Err(e) => panic!("retry or skip: {e}"),
                }
            }
            assert_eq!(
                went, 1,
                "round {round}: a retry and a skip both went through"
            );
            let view = setup.plan_get(id).await.unwrap();
            let t = &view.tasks[0];
            assert!(
                matches!(
                    (t.status, t.attempt),
                    (TaskStatus::Skipped, Some(1)) | (TaskStatus::Pending, Some(2))
                ),
                "round {round}: {:?} attempt {:?}",
                t.status,
                t.attempt
            );
            // Leave nothing open for the next round's claim.
            if t.status == TaskStatus::Pending {
                let run = promote_and_claim(setup.as_ref()).await[0];
                setup
                    .run_finish_many("r-test", &[failed(run)], Ts::now())
                    .await
                    .unwrap();
            }
        }

        // Racing Runs of a plan not started: one starts it.
        for round in 0..4 {
            let id = setup
                .plan_insert(
                    &plan(json!({"name": format!("run-{round}"), "start": false,
                        "tasks": noop_tasks(3)})),
                    "t".into(),
                    Ts::now(),
                )
                .await
                .unwrap();
            let racers: Vec<_> = stores
                .iter()
                .map(|store| {
                    let store = store.clone();
                    tokio::spawn(
                        async move { store.plan_start(id, "racer".into(), Ts::now()).await },
                    )
                })
                .collect();
            let mut started = 0;
            for racer in racers {
                match racer.await.unwrap() {
                    Ok(()) => started += 1,
                    Err(StoreError::Conflict(_)) => {}
                    Err(e) => panic!("plan start: {e}"),
                }
            }
            assert_eq!(started, 1, "round {round}: racing Runs that went through");
            for task in setup.plan_get(id).await.unwrap().tasks {
                assert_eq!(task.attempt, Some(1), "round {round}: {}", task.name);
            }
        }

        db.assert_open_task_counts().await;
    }

    pub async fn racing_retries_create_one_attempt_each(kind: Kind) {
        let db = TestDb::new(kind).await;
        let setup = db.store().await;
        let tasks = noop_tasks(6);
        let id = setup
            .plan_insert(
                &plan(json!({"name": "p", "tasks": tasks})),
                "t".into(),
                Ts::now(),
            )
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
        let stores = db.stores(8).await;
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
                                made +=
                                    match store.task_retry(task, "racer".into(), Ts::now()).await {
                                        Ok(_) => 1,
                                        Err(StoreError::Conflict(_)) => 0,
                                        Err(e) => panic!("task retry: {e}"),
                                    };
                            }
                        } else {
                            made += match store.plan_retry(id, "racer".into(), Ts::now()).await {
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
                "t".into(),
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
                tokio::spawn(
                    async move { store.task_retry(auto_task, "racer".into(), Ts::now()).await },
                )
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

    pub async fn eight_replicas_keep_every_invariant(kind: Kind) {
        let db = TestDb::new(kind).await;
        let shutdown = CancellationToken::new();
        let replicas = fleet(&db, "conc", 8, 6, &shutdown).await;
        let submitter = db.store().await;
        // Shared runs on db/0 and db/3 share them at most two at a time.
        let capacities: std::collections::HashMap<String, i64> =
            [("db/0".to_owned(), 2), ("db/3".to_owned(), 2)]
                .into_iter()
                .collect();
        for (target, capacity) in &capacities {
            submitter
                .target_capacity_set(target, Some(*capacity), "test".into(), Ts::now())
                .await
                .unwrap();
        }
        let mut ids = Vec::new();
        for p in 0..PLANS {
            let tasks: Vec<_> = (0..TASKS_PER_PLAN)
                .map(|t| {
                    let n = p * TASKS_PER_PLAN + t;
                    let mut task = json!({
                        "name": format!("t{t}"),
                        "target": format!("db/{}", n % TARGETS),
                        // Two in three exclusive, the rest shared.
                        "exclusive": !n.is_multiple_of(3),
                        "sleep": if n.is_multiple_of(5) { "3ms" } else { "0s" },
                    });
                    // Every fourth task carries a version, deliberately out
                    // of submission order across plans.
                    if n.is_multiple_of(4) {
                        task["version"] = json!(format!("{}.{}", (PLANS - p) % 4, t));
                    }
                    // Every seventh waits for the two tasks before it.
                    if t >= 2 && t % 7 == 0 {
                        task["depends_on"] = json!([format!("t{}", t - 1), format!("t{}", t - 2)]);
                    }
                    task
                })
                .collect();
            let limit = if p % 2 == 0 {
                json!(2 + p % 3)
            } else {
                json!(null)
            };
            let mut file = json!({"name": format!("plan-{p}"), "tasks": tasks});
            if !limit.is_null() {
                file["parallel_limit"] = limit;
            }
            ids.push(
                submitter
                    .plan_insert(&plan(file), "test".into(), Ts::now())
                    .await
                    .unwrap(),
            );
        }
        let views = all_done_then_stop(
            &submitter,
            &ids,
            Duration::from_secs(120),
            replicas,
            &shutdown,
        )
        .await;
        let events = invariants::all_events(submitter.as_ref()).await;
        invariants::check_with_capacities(&views, &events, &capacities);
        db.assert_open_task_counts().await;
        let runs = views.iter().map(|v| v.tasks.len()).sum::<usize>();
        assert_eq!(runs, PLANS * TASKS_PER_PLAN);
        let replicas_used: std::collections::HashSet<_> = views
            .iter()
            .flat_map(|v| v.tasks.iter().filter_map(|t| t.replica_id.clone()))
            .collect();
        assert!(
            replicas_used.len() >= 4,
            "work spread over replicas: {replicas_used:?}"
        );
    }

    /// Many promoters racing over diamonds (a → b, c → d) and over a
    /// target of capacity 3: the event history shows no dependent promoted
    /// before its dependencies were DONE, and never more than 3 runs
    /// holding the capped target.
    pub async fn racing_promoters_start_no_dependent_early_and_keep_capacity(kind: Kind) {
        let db = TestDb::new(kind).await;
        let setup = db.store().await;
        setup
            .target_capacity_set("pool/capped", Some(3), "t".into(), Ts::now())
            .await
            .unwrap();
        let mut ids = Vec::new();
        for p in 0..6 {
            let mut tasks = vec![
                json!({"name": "a", "target": format!("d{p}/a"), "sleep": "0s"}),
                json!({"name": "b", "target": format!("d{p}/b"), "sleep": "0s", "depends_on": ["a"]}),
                json!({"name": "c", "target": format!("d{p}/c"), "sleep": "0s", "depends_on": ["a"]}),
                json!({"name": "d", "target": format!("d{p}/d"), "sleep": "0s", "depends_on": ["b", "c"]}),
            ];
            for i in 0..5 {
                tasks.push(json!({"name": format!("pool{i}"), "target": "pool/capped",
                    "exclusive": false, "sleep": "0s"}));
            }
            ids.push(
                setup
                    .plan_insert(
                        &plan(json!({"name": format!("diamond-{p}"), "tasks": tasks})),
                        "t".into(),
                        Ts::now(),
                    )
                    .await
                    .unwrap(),
            );
        }
        race_to_the_end(&db, setup.as_ref(), 200).await;
        let mut views = Vec::new();
        for id in ids {
            let view = setup.plan_get(id).await.unwrap();
            assert_eq!(view.status, PlanStatus::Done, "{}", view.name);
            views.push(view);
        }
        let events = invariants::all_events(setup.as_ref()).await;
        let capacities = [("pool/capped".to_owned(), 3)].into_iter().collect();
        invariants::check_with_capacities(&views, &events, &capacities);
        db.assert_open_task_counts().await;
    }

    /// Promoters racing while an operator pauses a plan and a target, and
    /// while a failed version halts its target: no promotion of theirs is
    /// recorded after the pause returned, and none beyond the halt.
    pub async fn racing_promoters_promote_nothing_paused_or_halted(kind: Kind) {
        let db = TestDb::new(kind).await;
        let setup = db.store().await;
        // Enough that neither plan can end between the check below and
        // the pauses.
        let many = |prefix: &str, target: &dyn Fn(usize) -> String| -> Vec<serde_json::Value> {
            (0..100)
                .map(
                    |i| json!({"name": format!("{prefix}{i}"), "target": target(i), "sleep": "0s"}),
                )
                .collect()
        };
        let paused_plan = setup
            .plan_insert(
                &plan(json!({"name": "paused", "parallel_limit": 2,
                    "tasks": many("p", &|i| format!("pp/{i}"))})),
                "t".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        let on_target = setup
            .plan_insert(
                &plan(json!({"name": "on-target", "tasks": many("t", &|_| "db/braked".into())})),
                "t".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        let busy = db.store().await;
        let stop = CancellationToken::new();
        // Eight promoters race without pause; one worker claims and
        // finishes at a steady pace, so the plans are far from done when
        // the brakes come.
        let racing = {
            let mut racers = Vec::new();
            for _ in 0..8 {
                let store = db.store().await;
                let stop = stop.clone();
                racers.push(tokio::spawn(async move {
                    while !stop.is_cancelled() {
                        store
                            .run_promote_round(&NodeLabels::default(), None, Ts::now())
                            .await
                            .expect("round");
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }));
            }
            let store = db.store().await;
            let stop = stop.clone();
            racers.push(tokio::spawn(async move {
                while !stop.is_cancelled() {
                    let got = store
                        .run_claim_many(&claim("r-brake", &[], 4), Ts::now())
                        .await
                        .expect("claim");
                    let finishes: Vec<_> = got.iter().map(|c| common::store::done(c.id)).collect();
                    store
                        .run_finish_many("r-brake", &finishes, Ts::now())
                        .await
                        .expect("finish");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }));
            racers
        };
        // Let some runs of both go through, then brake both.
        eventually(Duration::from_secs(30), "some runs done", || async {
            let done = |v: PlanView| {
                v.tasks
                    .iter()
                    .filter(|t| t.status == TaskStatus::Done)
                    .count()
            };
            let a = done(busy.plan_get(paused_plan).await.ok()?);
            let b = done(busy.plan_get(on_target).await.ok()?);
            (a >= 4 && b >= 4).then_some(())
        })
        .await;
        busy.plan_pause(paused_plan, "alice".into(), Ts::now())
            .await
            .unwrap();
        busy.target_pause("db/braked", "bob".into(), Ts::now())
            .await
            .unwrap();
        let braked_at = invariants::all_events(busy.as_ref())
            .await
            .last()
            .map_or(0, |e| e.id);
        tokio::time::sleep(Duration::from_millis(800)).await;
        stop.cancel();
        for r in racing {
            r.await.unwrap();
        }
        let mut braked_runs = HashSet::new();
        for id in [paused_plan, on_target] {
            for t in busy.plan_get(id).await.unwrap().tasks {
                braked_runs.insert(t.run_id.unwrap());
            }
        }
        let late: Vec<_> = invariants::all_events(busy.as_ref())
            .await
            .into_iter()
            .filter(|e| e.id > braked_at && braked_runs.contains(&e.run_id))
            .filter(|e| e.to == domain::model::RunStatus::Available)
            .collect();
        assert!(late.is_empty(), "promoted after the brakes: {late:?}");
        let view = busy.plan_get(paused_plan).await.unwrap();
        let waiting = view
            .tasks
            .iter()
            .filter(|t| t.status == TaskStatus::Pending)
            .count();
        assert!(waiting > 0, "the pause came before the plan ended");

        // Halt: version 1 fails for good; 8 promoters race and none of the
        // later versions starts.
        let versions: Vec<_> = (1..=20)
            .map(|v| json!({"name": format!("v{v}"), "target": "db/halt", "version": v.to_string(), "sleep": "0s"}))
            .collect();
        let halted = setup
            .plan_insert(
                &plan(json!({"name": "halted", "tasks": versions})),
                "t".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        let first = promote_and_claim(setup.as_ref()).await;
        let v1 = setup.plan_get(halted).await.unwrap().tasks[0]
            .run_id
            .unwrap();
        assert!(first.contains(&v1));
        setup
            .run_finish_many("r-test", &[failed(v1)], Ts::now())
            .await
            .unwrap();
        let rounds: Vec<_> = (0..8)
            .map(|_| {
                let store = setup.clone();
                tokio::spawn(async move {
                    for _ in 0..10 {
                        store
                            .run_promote_round(&NodeLabels::default(), None, Ts::now())
                            .await
                            .expect("round");
                    }
                })
            })
            .collect();
        for r in rounds {
            r.await.unwrap();
        }
        let view = setup.plan_get(halted).await.unwrap();
        for t in &view.tasks[1..] {
            assert_eq!(t.status, TaskStatus::Pending, "{}", t.name);
            assert_eq!(
                t.waiting_cause.as_deref(),
                Some("blocked: version 1 on db/halt FAILED — retry or skip it")
            );
        }
    }

    /// The leader claims in two places, its claimer and its promotion
    /// rounds; together they never start more runs than it has workers.
    /// Plans arrive while earlier runs execute, so rounds claim into the
    /// slots free at the time and leave the rest to the claimer.
    pub async fn a_replica_never_runs_more_than_its_workers(kind: Kind) {
        const WORKERS: usize = 3;
        let db = TestDb::new(kind).await;
        let store = db.store().await;
        let peak = Arc::new(Peak::default());
        let mut registry = Registry::builtin();
        registry.register("sleep", PeakCounted(peak.clone()));
        let config = SchedulerConfig {
            workers: WORKERS,
            poll_interval: Duration::from_millis(50),
            ..SchedulerConfig::default()
        };
        let shutdown = CancellationToken::new();
        let running = Replica::start(
            db.store().await,
            replica("r-peak", &[]),
            config,
            registry,
            shutdown.clone(),
        )
        .await
        .unwrap();
        let mut ids = Vec::new();
        for p in 0..12 {
            let tasks: Vec<_> = (0..5)
                .map(|t| json!({"name": format!("t{t}"), "target": format!("p{p}-{t}"), "sleep": "0s"}))
                .collect();
            ids.push(
                store
                    .plan_insert(
                        &plan(json!({"name": format!("p{p}"), "tasks": tasks})),
                        "test".into(),
                        Ts::now(),
                    )
                    .await
                    .unwrap(),
            );
            tokio::time::sleep(Duration::from_millis(4)).await;
        }
        for id in ids {
            plan_done(store.as_ref(), id).await;
        }
        shutdown.cancel();
        running.join().await.expect("no loop panicked");
        let most = peak.most.load(std::sync::atomic::Ordering::SeqCst);
        assert!(
            most <= WORKERS,
            "{most} runs executed at once on {WORKERS} workers"
        );
        assert_eq!(most, WORKERS, "the slots were all used");
    }

    /// The promoter hands the runs its round claims to its replica's
    /// worker, up to the free slots; a replica that cannot prove it is
    /// alive claims nothing in its rounds, and its runs wait AVAILABLE.
    pub async fn the_leaders_round_starts_what_it_claims_only_for_a_live_replica(kind: Kind) {
        use baton::loops::LeaderLease;
        use baton::loops::{Promoter, Worker};
        let db = TestDb::new(kind).await;
        let store = db.store().await;
        let config = SchedulerConfig {
            workers: 2,
            // Ownership lapses 300 ms after the last recorded heartbeat.
            heartbeat_interval: Duration::from_millis(100),
            stale_after: Duration::from_millis(400),
            ..SchedulerConfig::default()
        };
        let worker = Arc::new(Worker::new(
            baton::loops::DatabaseLedger::over(store.clone()),
            "r-lead".into(),
            Registry::builtin(),
            &config,
        ));
        let (_, leadership) =
            LeaderLease::new(store.clone(), "r-lead".into(), Duration::from_secs(6));
        let mut promoter = Promoter::new(store.clone(), leadership, &config)
            .claiming_for(worker.clone(), Vec::new());
        let tasks = |name: &str| -> Vec<serde_json::Value> {
            (0..3)
                .map(|i| json!({"name": format!("t{i}"), "target": format!("{name}-{i}"), "sleep": "30s"}))
                .collect()
        };
        // Unproven for longer than the replica may trust its ownership.
        tokio::time::sleep(Duration::from_millis(350)).await;
        let first = store
            .plan_insert(
                &plan(json!({"name": "unproven", "tasks": tasks("u")})),
                "test".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        assert_eq!(promoter.run_once().await.unwrap().promoted, 3);
        assert!(worker.running_ids().is_empty(), "nothing started");
        let view = store.plan_get(first).await.unwrap();
        assert!(view.tasks.iter().all(|t| t.status == TaskStatus::Available));

        // Proven again: the round claims two (its free slots) and they start.
        worker.ownership().proven(std::time::Instant::now());
        let second = store
            .plan_insert(
                &plan(json!({"name": "proven", "tasks": tasks("p")})),
                "test".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        assert_eq!(promoter.run_once().await.unwrap().promoted, 3);
        let view = store.plan_get(second).await.unwrap();
        let statuses: Vec<_> = view.tasks.iter().map(|t| t.status).collect();
        assert_eq!(
            statuses,
            [
                TaskStatus::Running,
                TaskStatus::Running,
                TaskStatus::Available
            ]
        );
        let mut running = worker.running_ids();
        running.sort_unstable();
        let claimed: Vec<i64> = view.tasks[..2].iter().map(|t| t.run_id.unwrap()).collect();
        assert_eq!(running, claimed, "the worker runs what the round claimed");
        let counts = worker.counters().snapshot();
        assert_eq!((counts.claimed, counts.claimed_in_round), (2, 2));
    }

    /// A running replica's promoter claims for that replica: on an idle
    /// leader with free slots, every run its rounds promote starts without
    /// the claimer (whose poll is an hour away, and which only a run left
    /// AVAILABLE would wake), and `/metrics` counts them as the round's.
    pub async fn a_leading_replica_starts_what_its_rounds_promote(kind: Kind) {
        let db = TestDb::new(kind).await;
        let store = db.store().await;
        let config = SchedulerConfig {
            workers: 4,
            poll_interval: Duration::from_secs(3600),
            ..SchedulerConfig::default()
        };
        let shutdown = CancellationToken::new();
        // The replica's own store: on SQLite only it hears the submits at
        // once (another store's would wait for the poll).
        let running = Replica::start(
            store.clone(),
            replica("r-round", &[]),
            config,
            Registry::builtin(),
            shutdown.clone(),
        )
        .await
        .unwrap();
        let submit = |name: String, tasks: Vec<serde_json::Value>| {
            let store = store.clone();
            async move {
                store
                    .plan_insert(
                        &plan(json!({"name": name, "tasks": tasks})),
                        "test".into(),
                        Ts::now(),
                    )
                    .await
                    .unwrap()
            }
        };
        // Whichever claim starts the first plan (the lease may come after
        // it), the claimer is asleep afterwards.
        plan_done(
            store.as_ref(),
            submit("warm-up".into(), noop_tasks(1)).await,
        )
        .await;
        let before = running.view().counters.snapshot();
        for p in 0..5 {
            plan_done(store.as_ref(), submit(format!("p{p}"), noop_tasks(3)).await).await;
        }
        let after = running.view().counters.snapshot();
        assert_eq!(
            (
                after.claimed - before.claimed,
                after.claimed_in_round - before.claimed_in_round
            ),
            (15, 15),
            "every run started by the round that promoted it"
        );
        shutdown.cancel();
        running.join().await.expect("no loop panicked");
    }

    /// A replica told to stop while its claimer is busy: a claim in flight
    /// when the signal comes still commits, and its runs must be among those
    /// the worker finishes or hands back. The rolling-upgrade check caught
    /// SIGTERM leaving two such runs RUNNING under a replica that was gone,
    /// for the sweeper to fail ("its run was abandoned"). Each of several
    /// stops lands at a different moment of a busy claimer; after each, no
    /// run may be RUNNING.
    pub async fn a_replica_stopped_mid_claim_strands_no_run(kind: Kind) {
        let db = TestDb::new(kind).await;
        let store = db.store().await;
        let id = store
            .plan_insert(
                &plan(json!({"name": "busy", "tasks": noop_tasks(4_000)})),
                "test".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        let config = SchedulerConfig {
            workers: 4,
            poll_interval: Duration::from_millis(5),
            shutdown_grace: Duration::from_secs(5),
            ..SchedulerConfig::default()
        };
        let (mut done_before, mut stops_at_work) = (0, 0);
        for stop in 0..12u64 {
            let shutdown = CancellationToken::new();
            let running = Replica::start(
                db.store().await,
                replica(&format!("r-stop-{stop}"), &[]),
                config.clone(),
                Registry::builtin(),
                shutdown.clone(),
            )
            .await
            .unwrap();
            tokio::time::sleep(Duration::from_millis(20 + 7 * stop)).await;
            shutdown.cancel();
            running.join().await.expect("no loop panicked");
            let view = store.plan_get(id).await.unwrap();
            let stranded: Vec<&str> = view
                .tasks
                .iter()
                .filter(|t| t.status == TaskStatus::Running)
                .map(|t| t.name.as_str())
                .collect();
            assert!(
                stranded.is_empty(),
                "stop {stop} left runs RUNNING under a stopped replica: {stranded:?}"
            );
            let done = view
                .tasks
                .iter()
                .filter(|t| t.status == TaskStatus::Done)
                .count();
            if done > done_before {
                stops_at_work += 1;
            }
            done_before = done;
        }
        // Otherwise the stops could have come before any claim and the
        // case would prove nothing.
        assert!(
            stops_at_work >= 6,
            "only {stops_at_work} of 12 replicas ran runs before their stop"
        );
        let view = store.plan_get(id).await.unwrap();
        assert!(
            view.tasks.iter().all(|t| t.status != TaskStatus::Failed),
            "no run was failed by a clean stop"
        );
    }
}
