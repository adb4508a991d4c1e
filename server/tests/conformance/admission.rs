//! Admission (docs/design.md, "Admission"), on SQLite and PostgreSQL: a
//! submit writes AVAILABLE the runs the next round would certainly
//! promote, with the history a round would have written, and leaves
//! PENDING, for the round, every run whose gates a round must judge.

use domain::gates::CAUSE_NEW;
use domain::model::{RunStatus, TaskStatus};
use domain::time::Ts;
use serde_json::json;

use baton::plan::{MAX_ADMITTED_EXCLUSIVE_TARGETS, MIN_ADMITTED_RUNS};

use crate::common::store::{claim, promote, task_named};
use crate::common::{Kind, TestDb};
use crate::{per_backend, submit};

per_backend!(cases:
    a_plain_run_is_available_from_its_submit,
    runs_a_round_must_judge_are_left_pending,
    a_plan_naming_too_many_exclusive_targets_is_left_to_the_round,
    admitting_submits_racing_replicas_keep_every_invariant,
);

mod cases {
    pub use super::racing::admitting_submits_racing_replicas_keep_every_invariant;

    use super::*;

    pub async fn a_plain_run_is_available_from_its_submit(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        // Enough tasks for admission to pay, two of them per target.
        let tasks: Vec<_> = (0..MIN_ADMITTED_RUNS)
            .map(|i| {
                json!({"name": format!("t{i}"), "target": format!("db/{}", i / 2),
                "exclusive": false, "sleep": "0s"})
            })
            .collect();
        let id = submit(s.as_ref(), json!({"name": "plain", "tasks": tasks})).await;
        let view = s.plan_get(id).await.unwrap();
        for task in &view.tasks {
            assert_eq!(task.status, TaskStatus::Available, "{}", task.name);
            assert_eq!(task.waiting_cause, None, "{}", task.name);
            let run = s.run_get(task.run_id.unwrap()).await.unwrap();
            let steps: Vec<_> = run
                .events
                .iter()
                .map(|e| (e.from, e.to, e.actor.as_str(), e.at, e.detail.as_deref()))
                .collect();
            // What a round's promotion writes, at the submit's time.
            assert_eq!(
                steps,
                vec![
                    (
                        None,
                        RunStatus::Pending,
                        "t",
                        view.created_at,
                        Some("submitted")
                    ),
                    (
                        Some(RunStatus::Pending),
                        RunStatus::Available,
                        "scheduler",
                        view.created_at,
                        None
                    ),
                ],
                "{}",
                task.name
            );
        }
        let round = promote(s.as_ref()).await;
        assert_eq!(
            (round.promoted, round.waiting),
            (0, 0),
            "nothing left to judge"
        );
        let claimed = s
            .run_claim_many(&claim("r-one", &[], 1000), Ts::now())
            .await
            .unwrap();
        assert_eq!(claimed.len(), MIN_ADMITTED_RUNS);
    }

    pub async fn runs_a_round_must_judge_are_left_pending(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let shared = |name: &str, target: &str| json!({"name": name, "target": target, "exclusive": false, "sleep": "0s"});
        s.target_pause("db/paused", "ops".into(), Ts::now())
            .await
            .unwrap();
        s.target_capacity_set("db/capped", Some(5), "ops".into(), Ts::now())
            .await
            .unwrap();
        // An exclusive run of another plan, PENDING: it reserves db/held.
        let holder = submit(
            s.as_ref(),
            json!({"name": "holder", "tasks": [{"name": "x", "target": "db/held", "sleep": "0s"}]}),
        )
        .await;
        let holder = s.plan_get(holder).await.unwrap();
        assert_eq!(
            task_named(&holder, "x").status,
            TaskStatus::Pending,
            "exclusive runs are the round's"
        );
        // Each plan padded to the size admission asks for.
        let padded = |name: &str, mut tasks: Vec<serde_json::Value>| {
            let n = MIN_ADMITTED_RUNS.saturating_sub(tasks.len());
            tasks.extend((0..n).map(|i| shared(&format!("pad{i}"), &format!("pad/{name}/{i}"))));
            json!({"name": name, "tasks": tasks})
        };
        let mixed = submit(
            s.as_ref(),
            padded(
                "mixed",
                vec![
                    json!({"name": "excl", "target": "db/m", "sleep": "0s"}),
                    shared("beside-excl", "db/m"),
                    shared("held", "db/held"),
                    shared("paused", "db/paused"),
                    shared("capped", "db/capped"),
                    json!({"name": "versioned", "target": "db/v", "exclusive": false,
                    "version": "1", "sleep": "0s"}),
                    json!({"name": "pinned", "target": "db/n", "exclusive": false, "node": "gpu",
                    "sleep": "0s"}),
                    json!({"name": "later", "target": "db/l", "exclusive": false,
                    "run_at": "2999-01-01T00:00:00Z", "sleep": "0s"}),
                    shared("free", "db/free"),
                ],
            ),
        )
        .await;
        let view = s.plan_get(mixed).await.unwrap();
        for task in &view.tasks {
            let name = task.name.as_str();
            let (status, cause) = match name == "free" || name.starts_with("pad") {
                true => (TaskStatus::Available, None),
                false => (TaskStatus::Pending, Some(CAUSE_NEW)),
            };
            assert_eq!(task.status, status, "{}", task.name);
            assert_eq!(task.waiting_cause.as_deref(), cause, "{}", task.name);
        }
        // Plans whose gates need the round: a limit, a dependency, a plan
        // submitted stopped and started later; and one too small for
        // admission to pay.
        let mut file = padded("limited", vec![shared("a", "db/x")]);
        file["parallel_limit"] = json!(100);
        let limited = submit(s.as_ref(), file).await;
        let chained = submit(
            s.as_ref(),
            padded(
                "chained",
                vec![
                    shared("a", "db/y"),
                    json!({"name": "b", "target": "db/y", "exclusive": false, "depends_on": ["a"],
                    "sleep": "0s"}),
                ],
            ),
        )
        .await;
        let mut file = padded("stopped", vec![shared("a", "db/z")]);
        file["start"] = json!(false);
        let stopped = submit(s.as_ref(), file).await;
        s.plan_start(stopped, "ops".into(), Ts::now())
            .await
            .unwrap();
        let small: Vec<_> = (0..MIN_ADMITTED_RUNS - 1)
            .map(|i| {
                if i == 0 {
                    shared("a", "db/s")
                } else {
                    shared(&format!("s{i}"), &format!("small/{i}"))
                }
            })
            .collect();
        let small = submit(s.as_ref(), json!({"name": "small", "tasks": small})).await;
        for id in [limited, chained, stopped, small] {
            let view = s.plan_get(id).await.unwrap();
            let a = task_named(&view, "a");
            assert_eq!(a.status, TaskStatus::Pending, "{}", view.name);
            assert_eq!(a.waiting_cause.as_deref(), Some(CAUSE_NEW), "{}", view.name);
        }
        // The round then judges them as it always did.
        promote(s.as_ref()).await;
        let view = s.plan_get(mixed).await.unwrap();
        assert_eq!(task_named(&view, "excl").status, TaskStatus::Available);
        assert_eq!(task_named(&view, "beside-excl").status, TaskStatus::Pending);
        assert_eq!(task_named(&view, "held").status, TaskStatus::Pending);
        assert_eq!(task_named(&view, "paused").status, TaskStatus::Pending);
        assert_eq!(task_named(&view, "capped").status, TaskStatus::Available);
        let limited = s.plan_get(limited).await.unwrap();
        assert_eq!(task_named(&limited, "a").status, TaskStatus::Available);
    }

    /// The submit checks each shared task's target against the plan's
    /// exclusive ones in a list it carries; past the cap it admits none.
    pub async fn a_plan_naming_too_many_exclusive_targets_is_left_to_the_round(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let plan = |name: &str, exclusive_targets: usize| {
            let shared = (0..MIN_ADMITTED_RUNS).map(|i| {
                json!({"name": format!("s{i}"), "target": format!("{name}/shared/{i}"),
                "exclusive": false, "sleep": "0s"})
            });
            let exclusive = (0..exclusive_targets).map(|i| {
                json!({"name": format!("x{i}"), "target": format!("{name}/own/{i}"),
                "sleep": "0s"})
            });
            json!({"name": name, "tasks": shared.chain(exclusive).collect::<Vec<_>>()})
        };
        let at_cap = submit(s.as_ref(), plan("at-cap", MAX_ADMITTED_EXCLUSIVE_TARGETS)).await;
        let past_cap = submit(
            s.as_ref(),
            plan("past-cap", MAX_ADMITTED_EXCLUSIVE_TARGETS + 1),
        )
        .await;
        // The distinct statuses of the tasks named `prefix…`.
        let statuses = |view: &domain::model::PlanView, prefix: &str| -> Vec<TaskStatus> {
            let mut seen = Vec::new();
            for t in view.tasks.iter().filter(|t| t.name.starts_with(prefix)) {
                if !seen.contains(&t.status) {
                    seen.push(t.status);
                }
            }
            seen
        };
        let view = s.plan_get(at_cap).await.unwrap();
        assert_eq!(statuses(&view, "s"), [TaskStatus::Available]);
        assert_eq!(statuses(&view, "x"), [TaskStatus::Pending]);
        let view = s.plan_get(past_cap).await.unwrap();
        assert_eq!(statuses(&view, "s"), [TaskStatus::Pending]);
        assert_eq!(statuses(&view, "x"), [TaskStatus::Pending]);
        // The round promotes them all: nothing about the plan holds them.
        promote(s.as_ref()).await;
        let view = s.plan_get(past_cap).await.unwrap();
        assert_eq!(statuses(&view, ""), [TaskStatus::Available]);
    }
}

mod racing {
    use std::time::Duration;

    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::common::{invariants, plan};
    use crate::{all_done_then_stop, fleet};

    /// Submitters race four working replicas' rounds and each other on
    /// four targets: plain shared plans (admitted when the lock is free)
    /// beside single exclusive runs on the same targets. The history shows
    /// no exclusive run sharing its target and every run executed once.
    pub async fn admitting_submits_racing_replicas_keep_every_invariant(kind: Kind) {
        let db = TestDb::new(kind).await;
        let shutdown = CancellationToken::new();
        let replicas = fleet(&db, "admit", 4, 4, &shutdown).await;
        let mut submitters = Vec::new();
        for w in 0..6 {
            let s = db.store().await;
            submitters.push(tokio::spawn(async move {
                let mut ids = Vec::new();
                for p in 0..8 {
                    let target = format!("db/{}", (w + p) % 4);
                    let file = match (w + p) % 3 {
                        0 => json!({"name": format!("x-{w}-{p}"), "tasks": [
                            {"name": "x", "target": target, "sleep": "2ms"}]}),
                        _ => json!({"name": format!("s-{w}-{p}"), "tasks": (0..MIN_ADMITTED_RUNS)
                            .map(|t| json!({"name": format!("s{t}"), "target": target,
                                "exclusive": false, "sleep": "0s"}))
                            .collect::<Vec<_>>()}),
                    };
                    ids.push(
                        s.plan_insert(&plan(file), "t".into(), Ts::now())
                            .await
                            .unwrap(),
                    );
                }
                ids
            }));
        }
        let mut ids = Vec::new();
        for submitter in submitters {
            ids.extend(submitter.await.unwrap());
        }
        let s = db.store().await;
        let views =
            all_done_then_stop(&s, &ids, Duration::from_secs(60), replicas, &shutdown).await;
        let events = invariants::all_events(s.as_ref()).await;
        invariants::check(&views, &events);
        assert_eq!(views.len(), 48);
        // Not a race the rounds won every time.
        assert!(
            invariants::admitted_runs(&events) > 0,
            "no run was admitted"
        );
    }
}
