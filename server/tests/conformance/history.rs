//! A scripted scenario's whole history, written out as text and compared
//! with `history.golden`, which the store wrote before runs' ordinary
//! transitions became stamps on their rows (docs/design.md, "Status
//! model"): the timeline, the API's `events` and the global order the
//! invariant checks replay must read exactly as they did when every
//! transition was an event row.
//!
//! The scenario covers every way a transition is recorded: submit,
//! promotion, a round's own claim (PENDING → RUNNING in one write), claims
//! and finishes, an automatic retry, a hand-back, a second claim and the
//! first replica's late finish of the same run (fenced), a
//! cancel asked of a RUNNING run and one of an AVAILABLE run, an approval,
//! a sweep of a dead replica's run, its late success (fenced, noted, and
//! the unstarted retry ended), and an operator's retry.
//!
//! `BATON_WRITE_HISTORY_GOLDEN=1` writes the file instead of comparing:
//! that is how it was made, on the build before the change.

use std::collections::HashMap;
use std::time::Duration;

use baton::store::Store;
use domain::model::{EventView, RunStatus};
use domain::time::Ts;
use serde_json::json;

use crate::common::invariants::all_events;
use crate::common::store::{claim, done, failed, replica, task_named};
use crate::common::{Kind, TestDb, plan};
use crate::per_backend;

per_backend!(cases: a_scripted_scenario_reads_as_it_did_before_stamps);

const GOLDEN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/conformance/history.golden"
);

mod cases {
    use super::*;

    pub async fn a_scripted_scenario_reads_as_it_did_before_stamps(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = Ts::now();
        let written = scenario(s.as_ref(), t0).await;
        if std::env::var_os("BATON_WRITE_HISTORY_GOLDEN").is_some() {
            std::fs::write(GOLDEN, &written).expect("write the golden history");
            return;
        }
        let golden = std::fs::read_to_string(GOLDEN).expect("history.golden");
        assert_eq!(
            written, golden,
            "the history reads differently from history.golden"
        );
        // Where it was stored: on PostgreSQL only the ten unusual
        // transitions are rows (two retries' and one operator retry's
        // creations, an approval, a hand-back and the claim it undid, a
        // cancel before running, two sweeps, an end without running), and
        // the stamped end a late finish turned into one; SQLite writes a
        // row for each.
        let rows = db.count("SELECT COUNT(*) FROM run_event").await;
        let expected = match kind {
            Kind::Postgres => 11,
            Kind::Sqlite => written.lines().count() as i64,
        };
        assert_eq!(rows, expected, "event rows");
    }
}

/// `t0` plus `secs` seconds: every step's time is scripted, so the
/// history's times are too (a claim stamps its start a little after the
/// time it is given, which [`render`] rounds away).
fn at(t0: Ts, secs: u64) -> Ts {
    t0.plus(Duration::from_secs(secs))
}

async fn scenario(s: &dyn Store, t0: Ts) -> String {
    let none = Vec::<String>::new();
    let submit = |name: &'static str, tasks: serde_json::Value, by: &'static str, secs| async move {
        s.plan_insert(
            &plan(json!({"name": name, "tasks": tasks})),
            by.into(),
            at(t0, secs),
        )
        .await
        .unwrap()
    };
    let round = |secs| async move {
        s.run_promote_round(&Default::default(), None, at(t0, secs))
            .await
            .unwrap()
    };
    let run_of = |plan: i64, task: &'static str| async move {
        let view = s.plan_get(plan).await.unwrap();
        let task = task_named(&view, task);
        (task.id, task.run_id.unwrap())
    };
    // Claims and finishes, as the replica named, at a scripted second.
    let claim_as = |replica: &'static str, secs| {
        let none = &none;
        async move {
            s.run_claim_many(&claim(replica, none, 10), at(t0, secs))
                .await
                .unwrap()
        }
    };
    let finish_as = |replica: &'static str, finishes: Vec<baton::store::Finish>, secs| async move {
        s.run_finish_many(replica, &finishes, at(t0, secs))
            .await
            .unwrap()
    };
    for r in ["r-one", "r-two", "r-dead"] {
        s.replica_upsert(&replica(r, &[]), t0).await.unwrap();
    }

    // The ordinary path, a failure retried automatically, and a task
    // waiting for approval.
    let ordinary = submit(
        "ordinary",
        json!([
            {"name": "a", "target": "x1", "sleep": "0s"},
            {"name": "b", "target": "x2", "sleep": "0s", "max_attempts": 2},
            {"name": "gated", "target": "x3", "sleep": "0s", "approval": "required"},
        ]),
        "alice",
        0,
    )
    .await;
    round(1).await;
    let claimed = claim_as("r-one", 2).await;
    assert_eq!(claimed.len(), 2);
    let (_, a) = run_of(ordinary, "a").await;
    let (_, b) = run_of(ordinary, "b").await;
    finish_as("r-one", vec![done(a), failed(b)], 3).await;
    let (gated, _) = run_of(ordinary, "gated").await;
    s.task_approve(gated, "bob".into(), at(t0, 4))
        .await
        .unwrap();

    // A round that claims for its own replica: PENDING → RUNNING at once.
    let quick = submit(
        "quick",
        json!([{"name": "q", "target": "y1", "sleep": "0s"}]),
        "carol",
        5,
    )
    .await;
    let mine = claim("r-two", &none, 10);
    s.run_promote_round(&Default::default(), Some(&mine), at(t0, 6))
        .await
        .unwrap();
    // The approved task and b's retry (its backoff passed) are taken by
    // the same round.
    let (_, q) = run_of(quick, "q").await;
    let (_, gated_run) = run_of(ordinary, "gated").await;
    let (_, b_retry) = run_of(ordinary, "b").await;
    let report = finish_as("r-two", vec![done(q), done(gated_run), done(b_retry)], 7).await;
    assert_eq!(report.finished.len(), 3, "{report:?}");

    // Handed back at shutdown, claimed again elsewhere.
    let moved = submit(
        "moved",
        json!([{"name": "m", "target": "z1", "sleep": "0s"}]),
        "alice",
        50,
    )
    .await;
    round(51).await;
    let (_, m) = run_of(moved, "m").await;
    claim_as("r-one", 52).await;
    let back = s
        .run_hand_back_many("r-one", &[m], "replica r-one shutting down", at(t0, 53))
        .await
        .unwrap();
    assert_eq!(back, vec![m]);
    claim_as("r-two", 54).await;
    finish_as("r-two", vec![done(m)], 55).await;
    // The first execution's success, arriving late: fenced, and a late
    // success checks for a note to make, which turns the run's stamped
    // end (r-two's) into its event row. It must read as it did.
    let late = finish_as("r-one", vec![done(m)], 56).await;
    assert_eq!(late.fenced, vec![m], "{late:?}");
    assert!(late.succeeded_late.is_empty(), "{late:?}");

    // Canceled: one RUNNING (asked, confirmed by its replica's finish),
    // one AVAILABLE (at once).
    let stopped = submit(
        "stopped",
        json!([
            {"name": "running", "target": "c1", "sleep": "0s"},
            {"name": "waiting", "target": "c2", "sleep": "0s", "node": "gpu"},
        ]),
        "dave",
        60,
    )
    .await;
    let mut gpu = domain::gates::NodeLabels::default();
    gpu.live.insert("gpu".into());
    s.run_promote_round(&gpu, None, at(t0, 61)).await.unwrap();
    claim_as("r-one", 62).await;
    let (running_task, running) = run_of(stopped, "running").await;
    let (waiting_task, _) = run_of(stopped, "waiting").await;
    s.task_cancel(running_task, "erin".into(), at(t0, 63))
        .await
        .unwrap();
    s.task_cancel(waiting_task, "erin".into(), at(t0, 64))
        .await
        .unwrap();
    finish_as("r-one", vec![failed(running)], 65).await;

    // A dead replica's run: swept, then its late success arrives (fenced,
    // noted, and its unstarted retry ends DONE); then an operator retries
    // another swept task.
    let dead = submit(
        "dead",
        json!([
            {"name": "late", "target": "d1", "sleep": "0s", "max_attempts": 2},
            {"name": "lost", "target": "d2", "sleep": "0s"},
        ]),
        "alice",
        70,
    )
    .await;
    round(71).await;
    claim_as("r-dead", 72).await;
    let (_, late) = run_of(dead, "late").await;
    let (lost_task, _) = run_of(dead, "lost").await;
    s.replica_upsert(&replica("r-one", &[]), at(t0, 80))
        .await
        .unwrap();
    s.run_sweep(Duration::from_secs(10), None, at(t0, 85))
        .await
        .unwrap();
    let report = finish_as("r-dead", vec![done(late)], 86).await;
    assert_eq!(report.fenced, vec![late]);
    s.task_retry(lost_task, "frank".into(), at(t0, 90))
        .await
        .unwrap();
    round(91).await;
    let claimed = claim_as("r-one", 92).await;
    assert_eq!(claimed.len(), 1);
    finish_as("r-one", vec![done(claimed[0].id)], 93).await;

    let events = all_events(s).await;
    // Each run's page reads its part of the same history, in order.
    let mut by_run: HashMap<i64, Vec<EventView>> = HashMap::new();
    for e in &events {
        by_run.entry(e.run_id).or_default().push(e.clone());
    }
    for (run, expected) in &by_run {
        assert_eq!(&s.run_get(*run).await.unwrap().events, expected);
    }
    assert!(
        events
            .iter()
            .any(|e| e.from.is_none() && e.to == RunStatus::Pending)
    );
    render(&events, t0)
}

/// One line per transition, in the history's order. Run ids become their
/// order of appearance and times whole seconds after `t0` (`<t0>` in a
/// detail), so the text does not depend on the database's ids or the day.
///
/// Transitions of the same scripted second are grouped by run, each run's
/// in its own order: they were made by one statement or one round, which
/// never promised an order among different runs (a round's claim wrote
/// all its promotions' event rows, then all its claims'; its stamps are
/// numbered run by run). Across seconds, and within each run, the order
/// is the history's own.
fn render(events: &[EventView], t0: Ts) -> String {
    let mut runs: HashMap<i64, usize> = HashMap::new();
    let mut lines = Vec::new();
    // A sweep's detail names the dead replica's last heartbeat, at t0.
    let t0_clock = t0.0.format("%H:%M:%SZ").to_string();
    for e in events {
        let n = runs.len() + 1;
        let run = *runs.entry(e.run_id).or_insert(n);
        let secs = (e.at - t0.0).num_milliseconds().div_euclid(1000);
        let from = e.from.map_or("-".to_owned(), |s| s.to_string());
        let line = format!(
            "run {run}: {from} -> {} replica={} actor={} at=+{secs}s detail={}\n",
            e.to,
            e.replica_id.as_deref().unwrap_or("-"),
            e.actor,
            e.detail
                .as_deref()
                .unwrap_or("-")
                .replace(&t0_clock, "<t0>"),
        );
        lines.push(((secs, run), line));
    }
    // Stable: each run's transitions keep their order.
    lines.sort_by_key(|(key, _)| *key);
    lines.into_iter().map(|(_, line)| line).collect()
}
