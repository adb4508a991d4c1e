//! The checks a chaos schedule ends with, over what the database recorded
//! (every run's event history) and what it could not fake (the executions
//! the commands appended to a file, the POSTs the webhook receiver saw).
//! A violation panics with the rule, the runs or plan that broke it and
//! the faults around it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use baton::store::Store;
use domain::model::{EventView, PlanStatus, RunStatus, TaskStatus};
use domain::time::Ts;

use crate::STALE_AFTER;
use crate::common::invariants::{self, RunFacts};
use crate::common::receiver::Receiver;
use crate::faults::Faults;
use crate::stream::{Expect, Submitted};

pub struct Summary {
    pub tasks: usize,
    pub runs: usize,
    pub executions: usize,
    /// Executions whose command exited 0.
    pub successes: usize,
    /// Webhook POSTs received, and how many repeated a delivery key (a
    /// receiver's 503 or an answer lost to a fault; same key each time).
    pub posts: usize,
    pub repeats: usize,
    /// The longest a killed replica's RUNNING run took to be resolved.
    pub slowest_sweep: Duration,
    /// Plans left HALTED behind a task that failed for good.
    pub halted: usize,
    /// Runs a submit admitted (docs/design.md, "Admission").
    pub admitted: usize,
}

pub async fn check(
    store: &dyn Store,
    plans: &[Submitted],
    record: &Path,
    receiver: &Receiver,
    faults: &Faults,
    alone: bool,
) -> Summary {
    let events = invariants::all_events(store).await;
    let mut by_task = HashMap::new();
    let mut tasks = 0;
    let mut halted = 0;
    for plan in plans {
        let view = store.plan_get(plan.id).await.unwrap();
        halted += usize::from(view.status == PlanStatus::Halted);
        for task in &view.tasks {
            tasks += 1;
            let skipped = faults.operator.skipped.contains(&task.id);
            // A version line halted behind a task that failed for good (its
            // attempts spent by kills) waits for an operator: HALTED.
            let halted = view.status == PlanStatus::Halted
                && task.status == TaskStatus::Pending
                && task
                    .waiting_cause
                    .as_deref()
                    .is_some_and(|c| c.starts_with(domain::model::BLOCKED_CAUSE));
            match plan.expect {
                Expect::Ends => assert!(
                    matches!(task.status, TaskStatus::Done | TaskStatus::Failed)
                        || (skipped && task.status == TaskStatus::Skipped)
                        || halted,
                    "nothing lost or stuck: plan {} task {} is {} ({:?})",
                    plan.id,
                    task.name,
                    task.status,
                    task.waiting_cause
                ),
                Expect::WaitsForever => assert!(
                    task.status == TaskStatus::Pending
                        && task
                            .waiting_cause
                            .as_deref()
                            .is_some_and(|c| c.starts_with("scheduled for")),
                    "a task due in 9999 waits with its time as the cause: plan {} task {} is {} ({:?})",
                    plan.id,
                    task.name,
                    task.status,
                    task.waiting_cause
                ),
            }
            by_task.insert(task.id, view.clone());
        }
    }
    // Every run has ended, so the queue of AVAILABLE runs, which the
    // overview counts, holds none: a row a statement left behind shows.
    let stats = store.overview_stats(Ts::now()).await.unwrap();
    assert_eq!(
        stats.live.get(&RunStatus::Available).copied().unwrap_or(0),
        0,
        "the queue of AVAILABLE runs is empty once every run has ended"
    );
    let run_ids: HashSet<i64> = events.iter().map(|e| e.run_id).collect();
    let mut facts: HashMap<i64, RunFacts> = HashMap::new();
    for run_id in &run_ids {
        let run = store.run_get(*run_id).await.unwrap();
        assert_ne!(run.status, RunStatus::Running, "run {run_id} left RUNNING");
        if run.status == RunStatus::Done && run.started_at.is_some() {
            log_kept(store, *run_id).await;
        } else if run.status == RunStatus::Done {
            // A retry a late success made needless: it never ran, and says so.
            assert!(
                run.error
                    .as_deref()
                    .is_some_and(|e| e.starts_with("not executed: run ")),
                "run {run_id} ended DONE without starting: {:?}",
                run.error
            );
        }
        let Some(view) = by_task.get(&run.task_id) else {
            continue;
        };
        let task = view.tasks.iter().find(|t| t.id == run.task_id).unwrap();
        let capacity = (task.target == crate::stream::CAPPED_TARGET).then_some(2);
        facts.insert(*run_id, RunFacts::of(view, task, capacity));
    }
    if let Err((why, run)) = invariants::replay(&events, &facts) {
        panic!(
            "{why}\nfaults:\n  {}\n{}",
            faults.log.join("\n  "),
            run_history(store, run).await
        );
    }
    let slowest_sweep = match killed_runs_resolved(&events, faults, alone) {
        Ok(slowest) => slowest,
        Err((why, run)) => panic!("{why}\n{}", run_history(store, run).await),
    };
    let executions = match no_execution_overlaps(record, &facts) {
        Ok(n) => n,
        Err(violation) => panic!("{}", report(store, faults, violation).await),
    };
    let successes = match no_success_twice(store, record, faults).await {
        Ok(n) => n,
        Err(violation) => panic!("{}", report(store, faults, violation).await),
    };
    let (posts, repeats) = webhooks_once(store, plans, receiver).await;
    Summary {
        tasks,
        runs: facts.len(),
        executions,
        successes,
        posts,
        repeats,
        slowest_sweep,
        halted,
        admitted: invariants::admitted_runs(&events),
    }
}

/// Invariant 8 for logs: a DONE run's output was stored from its first
/// line to its last, whatever faults came while it ran.
async fn log_kept(store: &dyn Store, run: i64) {
    let log = store.run_log(run).await.unwrap();
    let has = |prefix: &str| log.lines().any(|line| line.starts_with(prefix));
    assert!(
        has("started p") && has("ended p"),
        "invariant 8: run {run} ended DONE but its log lost its first or last line: {:?}",
        log.chars().take(500).collect::<String>()
    );
}

/// A violation with every fault and the history of the runs concerned.
async fn report(store: &dyn Store, faults: &Faults, (why, runs): (String, Vec<i64>)) -> String {
    let mut report = format!("{why}\nfaults:\n  {}\n", faults.log.join("\n  "));
    for run in runs {
        report.push_str(&run_history(store, run).await);
    }
    report
}

async fn run_history(store: &dyn Store, run: i64) -> String {
    let view = store.run_get(run).await.unwrap();
    let mut report = format!(
        "run {run} (attempt {}, replica {:?}): {:?}\n",
        view.attempt, view.replica_id, view.error
    );
    for e in view.events {
        report.push_str(&format!(
            "  {} {:?} -> {} by {} ({:?}) {:?}\n",
            e.at.format("%H:%M:%S%.3f"),
            e.from,
            e.to,
            e.actor,
            e.replica_id,
            e.detail
        ));
    }
    report
}

/// Invariant 6: a run RUNNING on a replica when it was killed leaves
/// RUNNING within `stale_after` + the sweep interval, plus a new leader's
/// lease (the killed replica may have led) and generous scheduling slack
/// for two shared cores — counted from the kill where other replicas can
/// sweep, and from the replacement's start where it is the only one
/// (SQLite). The slowest, or the run that took longer.
fn killed_runs_resolved(
    events: &[EventView],
    faults: &Faults,
    alone: bool,
) -> Result<Duration, (String, i64)> {
    let bound =
        STALE_AFTER + Duration::from_millis(200) + Duration::from_secs(1) + Duration::from_secs(5);
    let mut by_run: HashMap<i64, Vec<&EventView>> = HashMap::new();
    for e in events {
        by_run.entry(e.run_id).or_default().push(e);
    }
    let mut slowest = Duration::ZERO;
    for (run, history) in &by_run {
        for pair in history.windows(2) {
            let (claimed, left) = (pair[0], pair[1]);
            if claimed.to != RunStatus::Running {
                continue;
            }
            for kill in &faults.kills {
                let (replica, at) = (&kill.replica, &kill.at);
                if claimed.replica_id.as_deref() != Some(replica.as_str())
                    || claimed.at > *at
                    || left.at <= *at
                {
                    continue;
                }
                let from = if alone { kill.replaced_at } else { *at };
                let took = (left.at - from).to_std().unwrap_or_default();
                slowest = slowest.max(took);
                if took > bound {
                    return Err((
                        format!(
                            "invariant 6: run {run} was RUNNING on {replica}, SIGKILLed at {}, and left RUNNING only {took:?} after {} (bound {bound:?})",
                            at.format("%H:%M:%S%.3f"),
                            if alone {
                                "its replacement started"
                            } else {
                                "the kill"
                            }
                        ),
                        *run,
                    ));
                }
            }
        }
    }
    Ok(slowest)
}

/// Invariants 4 and 1 for processes: per task, the spans (first to last
/// line) of its executions never overlap; nor do an exclusive run's and
/// any other run's on its target — a cancel included, whose target stays
/// held until its command is dead. How many executions there were, or
/// what overlapped.
fn no_execution_overlaps(
    record: &Path,
    facts: &HashMap<i64, RunFacts>,
) -> Result<usize, (String, Vec<i64>)> {
    let text = std::fs::read_to_string(record).unwrap_or_default();
    let mut spans: BTreeMap<i64, (u128, u128)> = BTreeMap::new();
    let mut by_task: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for line in text.lines() {
        let (key, run, at, _) = record_line(line);
        let span = spans.entry(run).or_insert_with(|| {
            by_task.entry(key).or_default().push(run);
            (at, at)
        });
        span.0 = span.0.min(at);
        span.1 = span.1.max(at);
    }
    for (task, runs) in &by_task {
        overlap(runs, &spans, |_, _| true)
            .map_err(|(why, runs)| (format!("invariant 4: task {task}: {why}"), runs))?;
    }
    let mut by_target: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for run in spans.keys() {
        if let Some(f) = facts.get(run) {
            by_target.entry(f.target.as_str()).or_default().push(*run);
        }
    }
    for (target, runs) in &by_target {
        let exclusive = |a: i64, b: i64| facts[&a].exclusive || facts[&b].exclusive;
        overlap(runs, &spans, exclusive)
            .map_err(|(why, runs)| (format!("invariant 1: target {target}: {why}"), runs))?;
    }
    Ok(spans.len())
}

/// One line of the record: task key, run, when (ns), and whether the
/// command said it was about to exit 0.
fn record_line(line: &str) -> (&str, i64, u128, bool) {
    let mut parts = line.split(' ');
    let (Some(key), Some(run), Some(at)) = (parts.next(), parts.next(), parts.next()) else {
        panic!("a torn line in the record: {line:?}");
    };
    let exit0 = parts.next() == Some("exit0");
    (key, run.parse().unwrap(), at.parse().unwrap(), exit0)
}

/// No success twice: once a task's command said it was exiting 0, no
/// execution of that task starts later — unless a fault that may lose a
/// finished command's record (a kill, a freeze, a cut-off) hit its
/// replica between that exit and its record. How many successes there
/// were, or the two runs.
async fn no_success_twice(
    store: &dyn Store,
    record: &Path,
    faults: &Faults,
) -> Result<usize, (String, Vec<i64>)> {
    let text = std::fs::read_to_string(record).unwrap_or_default();
    let mut first_seen: BTreeMap<&str, BTreeMap<i64, u128>> = BTreeMap::new();
    let mut exited: Vec<(&str, i64, u128)> = Vec::new();
    for line in text.lines() {
        let (key, run, at, exit0) = record_line(line);
        let first = first_seen.entry(key).or_default().entry(run).or_insert(at);
        *first = (*first).min(at);
        if exit0 {
            exited.push((key, run, at));
        }
    }
    for &(key, run, at) in &exited {
        let Some((&later, _)) = first_seen[key]
            .iter()
            .find(|(r, first)| **r != run && **first > at)
        else {
            continue;
        };
        let when = chrono::DateTime::from_timestamp_nanos(at as i64);
        let replica = store
            .run_get(run)
            .await
            .unwrap()
            .replica_id
            .unwrap_or_default();
        if let Some(kind) = faults.excuse(&replica, when) {
            eprintln!(
                "chaos: task {key}: run {run} exited 0 at {}, and run {later} ran it again: excused by {kind} of {replica}",
                when.format("%H:%M:%S%.3f"),
            );
            continue;
        }
        return Err((
            format!(
                "no success twice: task {key}: run {run} exited 0 at {} on {replica}, yet run {later} ran it again, with no fault on that replica to excuse it",
                when.format("%H:%M:%S%.3f")
            ),
            vec![run, later],
        ));
    }
    Ok(exited.len())
}

/// The first two of `runs` whose spans overlap while `excludes` says they
/// may not run together.
fn overlap(
    runs: &[i64],
    spans: &BTreeMap<i64, (u128, u128)>,
    excludes: impl Fn(i64, i64) -> bool,
) -> Result<(), (String, Vec<i64>)> {
    let mut ordered: Vec<i64> = runs.to_vec();
    ordered.sort_by_key(|run| spans[run].0);
    for (i, &a) in ordered.iter().enumerate() {
        let a_last = spans[&a].1;
        for &b in &ordered[i + 1..] {
            let b_first = spans[&b].0;
            if b_first > a_last {
                break;
            }
            if excludes(a, b) {
                let at = |nanos: u128| {
                    chrono::DateTime::from_timestamp_nanos(nanos as i64).format("%H:%M:%S%.3f")
                };
                return Err((
                    format!(
                        "run {a} still ran {} ms after run {b} started (run {a} last seen {}, run {b} first seen {})",
                        (a_last - b_first) / 1_000_000,
                        at(a_last),
                        at(b_first)
                    ),
                    vec![a, b],
                ));
            }
        }
    }
    Ok(())
}

/// Invariant 5 as a receiver sees it: a plan that ended DONE was announced
/// PIPELINE_COMPLETED under exactly one delivery key and never FAILED; a
/// plan that ended FAILED was announced PIPELINE_FAILED under exactly one
/// key; a plan still waiting was announced nothing. Repeats of one key (a
/// retried delivery) are allowed; a second key is a duplicate
/// notification. How many POSTs came, and how many repeated a key.
async fn webhooks_once(
    store: &dyn Store,
    plans: &[Submitted],
    receiver: &Receiver,
) -> (usize, usize) {
    let posts = receiver.seen("sometimes");
    let mut keys: HashMap<(i64, &str), BTreeSet<&str>> = HashMap::new();
    for post in &posts {
        let body: serde_json::Value = serde_json::from_str(&post.body).unwrap();
        let plan = body["plan"]["id"]
            .as_i64()
            .expect("the payload names its plan");
        keys.entry((plan, post.event.as_str()))
            .or_default()
            .insert(post.delivery.as_str());
    }
    let count = |plan: i64, event: &str| keys.get(&(plan, event)).map_or(0, BTreeSet::len);
    for plan in plans {
        let view = store.plan_get(plan.id).await.unwrap();
        let status = view.status;
        let (completed, failed) = (
            count(plan.id, "PIPELINE_COMPLETED"),
            count(plan.id, "PIPELINE_FAILED"),
        );
        let want = match (plan.expect, status) {
            (Expect::WaitsForever, _) => (0, 0),
            (_, PlanStatus::Done) => (1, 0),
            (_, PlanStatus::Failed) => (0, 1),
            // Halted by a failure of its own (announced), or only by
            // another plan's (nothing to announce).
            (_, PlanStatus::Halted) => (0, usize::from(own_failure(&view))),
            (_, other) => panic!("plan {} ended {other:?} after settling", plan.id),
        };
        assert_eq!(
            (completed, failed),
            want,
            "invariant 5: plan {} ended {status:?}; delivery keys received (completed, failed): {:?} / {:?}",
            plan.id,
            keys.get(&(plan.id, "PIPELINE_COMPLETED")),
            keys.get(&(plan.id, "PIPELINE_FAILED"))
        );
    }
    let distinct: usize = keys.values().map(BTreeSet::len).sum();
    (posts.len(), posts.len() - distinct)
}

/// A task of the plan failed for good: its failure was announced.
pub fn own_failure(view: &domain::model::PlanView) -> bool {
    view.tasks.iter().any(|t| t.status == TaskStatus::Failed)
}
