//! Invariants 1–3 (docs/design.md, "Invariants"), checked by replaying the
//! event history in event-id order (the order the store serialised the
//! transitions in), plus "every run ran exactly once". Invariant 3 covers
//! versions (and halt on failure), dependencies and target capacity; pauses
//! are points in time that the history does not hold, so their tests check
//! them directly.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

use baton::store::Store;
use domain::model::{EventView, PlanView, RunStatus};
use domain::version;

/// What the replay needs to know of a run: its task, plan and gates.
#[derive(Debug, Clone)]
pub struct RunFacts {
    pub plan_id: i64,
    pub task_id: i64,
    pub target: String,
    pub exclusive: bool,
    pub version: Option<String>,
    pub limit: Option<i64>,
    /// Tasks that must be DONE (or skipped) before this run may start.
    pub depends_on: Vec<i64>,
    /// The target's capacity, when it had one for the whole history.
    pub capacity: Option<i64>,
    /// The task was skipped at some point: the history holds no event for
    /// a skip, so what its failure halted cannot be judged.
    pub skipped: bool,
}

impl RunFacts {
    /// The facts of `task` of `plan` (dependencies by name, resolved
    /// within the plan).
    pub fn of(plan: &PlanView, task: &domain::model::TaskView, capacity: Option<i64>) -> Self {
        let ids: HashMap<&str, i64> = plan.tasks.iter().map(|t| (t.name.as_str(), t.id)).collect();
        RunFacts {
            plan_id: plan.id,
            task_id: task.id,
            target: task.target.clone(),
            exclusive: task.exclusive,
            version: task.version.clone(),
            limit: plan.parallel_limit,
            depends_on: task.depends_on.iter().map(|n| ids[n.as_str()]).collect(),
            capacity,
            skipped: task.status == domain::model::TaskStatus::Skipped,
        }
    }
}

/// How many runs a submit admitted (docs/design.md, "Admission"): those
/// promoted at their creation's very instant, which no round matches.
pub fn admitted_runs(events: &[EventView]) -> usize {
    let created: HashMap<i64, _> = events
        .iter()
        .filter(|e| e.from.is_none())
        .map(|e| (e.run_id, e.at))
        .collect();
    events
        .iter()
        .filter(|e| e.from == Some(RunStatus::Pending) && e.to == RunStatus::Available)
        .filter(|e| created.get(&e.run_id) == Some(&e.at))
        .count()
}

/// Reads every event, page by page.
pub async fn all_events(store: &dyn Store) -> Vec<EventView> {
    let mut events = Vec::new();
    loop {
        let after = events.last().map_or(0, |e: &EventView| e.id);
        let page = store.event_list(after, 5000).await.expect("event page");
        if page.is_empty() {
            return events;
        }
        events.extend(page);
    }
}

/// Checks invariants 1–3 and exactly-once execution for every run of
/// `plans`, whose tasks must all be DONE with exactly one attempt.
pub fn check(plans: &[PlanView], events: &[EventView]) {
    check_with_capacities(plans, events, &HashMap::new());
}

/// [`check`] where some targets had a capacity throughout.
pub fn check_with_capacities(
    plans: &[PlanView],
    events: &[EventView],
    capacities: &HashMap<String, i64>,
) {
    let mut facts: HashMap<i64, RunFacts> = HashMap::new();
    for plan in plans {
        for task in &plan.tasks {
            let run = task.run_id.expect("every task has a run");
            let capacity = capacities.get(&task.target).copied();
            facts.insert(run, RunFacts::of(plan, task, capacity));
        }
    }
    if let Err((why, _)) = replay(events, &facts) {
        panic!("{why}");
    }
    let mut running_events: HashMap<i64, usize> = HashMap::new();
    let mut done_events: HashMap<i64, usize> = HashMap::new();
    for e in events.iter().filter(|e| facts.contains_key(&e.run_id)) {
        match (e.from, e.to) {
            (Some(RunStatus::Available), RunStatus::Running) => {
                *running_events.entry(e.run_id).or_default() += 1;
            }
            (_, RunStatus::Done) => *done_events.entry(e.run_id).or_default() += 1,
            _ => {}
        }
    }
    for run in facts.keys() {
        assert_eq!(
            running_events.get(run),
            Some(&1),
            "run {run} must start exactly once"
        );
        assert_eq!(
            done_events.get(run),
            Some(&1),
            "run {run} must finish DONE exactly once"
        );
    }
}

/// Invariants 1–3 (docs/design.md) over every run, retries included: the
/// rule broken and the run that broke it.
pub fn replay(events: &[EventView], facts: &HashMap<i64, RunFacts>) -> Result<(), (String, i64)> {
    let mut live: HashSet<i64> = HashSet::new();
    let mut active: HashSet<i64> = HashSet::new();
    // Tasks whose latest run ended DONE, and versioned tasks whose latest
    // run ended FAILED or CANCELED (until a new attempt of theirs).
    let mut done_tasks: HashSet<i64> = HashSet::new();
    let mut halting: HashMap<i64, i64> = HashMap::new();
    let skipped_tasks: HashSet<i64> = facts
        .values()
        .filter(|f| f.skipped)
        .map(|f| f.task_id)
        .collect();
    for e in events {
        let Some(me) = facts.get(&e.run_id) else {
            continue;
        };
        match (e.from, e.to) {
            (None, RunStatus::Pending) => {
                live.insert(e.run_id);
                halting.remove(&me.task_id);
            }
            (Some(RunStatus::Pending), RunStatus::Available) => {
                for other_id in &active {
                    let other = &facts[other_id];
                    if other.target == me.target && (me.exclusive || other.exclusive) {
                        return Err((
                            format!(
                                "invariant 1: run {} became AVAILABLE on {} beside active run {other_id} (event {})",
                                e.run_id, me.target, e.id
                            ),
                            e.run_id,
                        ));
                    }
                }
                if let Some(limit) = me.limit {
                    let in_plan = active
                        .iter()
                        .filter(|id| facts[*id].plan_id == me.plan_id)
                        .count() as i64;
                    if in_plan >= limit {
                        return Err((
                            format!(
                                "invariant 2: plan {} had {in_plan} active runs (limit {limit}) at event {}",
                                me.plan_id, e.id
                            ),
                            e.run_id,
                        ));
                    }
                }
                if let Some(v) = &me.version {
                    for other_id in &live {
                        let other = &facts[other_id];
                        if other.target == me.target
                            && other.task_id != me.task_id
                            && let Some(ov) = &other.version
                            && version::compare(ov, v) == Ordering::Less
                        {
                            return Err((
                                format!(
                                    "invariant 3: run {} (version {v}) promoted on {} while run {other_id} (version {ov}) was unfinished (event {})",
                                    e.run_id, me.target, e.id
                                ),
                                e.run_id,
                            ));
                        }
                    }
                }
                if let Some(v) = &me.version {
                    for (other_task, other_run) in &halting {
                        let other = &facts[other_run];
                        if other.target == me.target
                            && *other_task != me.task_id
                            && !other.skipped
                            && let Some(ov) = &other.version
                            && version::compare(ov, v) == Ordering::Less
                        {
                            return Err((
                                format!(
                                    "invariant 3 (halt): run {} (version {v}) promoted on {} while run {other_run} (version {ov}) had failed and was neither retried nor skipped (event {})",
                                    e.run_id, me.target, e.id
                                ),
                                e.run_id,
                            ));
                        }
                    }
                }
                // A skip is no event: a task skipped at some point counts
                // as complete throughout, as for the halt above.
                if let Some(dep) = me
                    .depends_on
                    .iter()
                    .find(|d| !done_tasks.contains(d) && !skipped_tasks.contains(d))
                {
                    return Err((
                        format!(
                            "invariant 3 (dependencies): run {} promoted before task {dep} it depends on was DONE (event {})",
                            e.run_id, e.id
                        ),
                        e.run_id,
                    ));
                }
                if let Some(capacity) = me.capacity {
                    let holding = active
                        .iter()
                        .filter(|id| facts[*id].target == me.target)
                        .count() as i64;
                    if holding >= capacity {
                        return Err((
                            format!(
                                "invariant 3 (capacity): run {} became AVAILABLE on {} beside {holding} active runs (capacity {capacity}, event {})",
                                e.run_id, me.target, e.id
                            ),
                            e.run_id,
                        ));
                    }
                }
                active.insert(e.run_id);
            }
            (_, to) if to.is_terminal() => {
                active.remove(&e.run_id);
                live.remove(&e.run_id);
                match to {
                    RunStatus::Done => {
                        done_tasks.insert(me.task_id);
                    }
                    RunStatus::Failed | RunStatus::Canceled if me.version.is_some() => {
                        halting.insert(me.task_id, e.run_id);
                    }
                    _ => {}
                }
            }
            (Some(RunStatus::Available | RunStatus::Running), RunStatus::Pending) => {
                active.remove(&e.run_id);
            }
            _ => {}
        }
    }
    Ok(())
}

/// Invariant 9 (docs/design.md, "Invariants"): schedule `id` made exactly
/// one plan for each tick of `ticks` (every tick due in the window
/// checked), and none for any other tick; a trigger's plans (no tick) are
/// left out.
pub async fn schedule_ticks_once(
    store: &dyn Store,
    id: i64,
    ticks: &[chrono::DateTime<chrono::Utc>],
) {
    // The view shows ten; read every plan instead.
    let list = store.plan_list(None, None, 500, 0).await.unwrap();
    let mut made: Vec<chrono::DateTime<chrono::Utc>> = Vec::new();
    for p in &list.plans {
        let plan = store.plan_get(p.id).await.unwrap();
        if let (Some(schedule), Some(tick)) = (plan.schedule_id, plan.schedule_tick_at)
            && schedule == id
        {
            made.push(tick);
        }
    }
    made.sort();
    let mut unique = made.clone();
    unique.dedup();
    assert_eq!(made.len(), unique.len(), "a tick made two plans: {made:?}");
    let expected: std::collections::BTreeSet<_> = ticks.iter().copied().collect();
    let got: std::collections::BTreeSet<_> = made.iter().copied().collect();
    assert_eq!(
        got.intersection(&expected).count(),
        expected.len(),
        "every due tick made a plan: missing {:?}",
        expected.difference(&got).collect::<Vec<_>>()
    );
}
