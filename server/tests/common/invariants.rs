//! SPEC §10 invariants 1–3, checked by replaying the event history in
//! event-id order (the order the store serialised the transitions in), plus
//! "every run ran exactly once".

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

use app::model::{EventView, PlanView, RunStatus};
use baton::store::{Store, version};

#[derive(Debug, Clone)]
struct RunFacts {
    plan_id: i64,
    target: String,
    exclusive: bool,
    version: Option<String>,
    limit: Option<i64>,
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
    let mut facts: HashMap<i64, RunFacts> = HashMap::new();
    for plan in plans {
        for task in &plan.tasks {
            let run = task.run_id.expect("every task has a run");
            facts.insert(
                run,
                RunFacts {
                    plan_id: plan.id,
                    target: task.target.clone(),
                    exclusive: task.exclusive,
                    version: task.version.clone(),
                    limit: plan.parallel_limit,
                },
            );
        }
    }
    let mut live: HashSet<i64> = HashSet::new(); // created, not terminal
    let mut active: HashSet<i64> = HashSet::new(); // AVAILABLE or RUNNING
    let mut running_events: HashMap<i64, usize> = HashMap::new();
    let mut done_events: HashMap<i64, usize> = HashMap::new();
    for e in events {
        let Some(me) = facts.get(&e.run_id) else {
            continue;
        };
        match (e.from, e.to) {
            (None, RunStatus::Pending) => {
                live.insert(e.run_id);
            }
            (Some(RunStatus::Pending), RunStatus::Available) => {
                for other in active
                    .iter()
                    .filter_map(|id| facts.get(id).map(|f| (id, f)))
                {
                    let (other_id, other) = other;
                    if other.target == me.target {
                        assert!(
                            !me.exclusive && !other.exclusive,
                            "invariant 1: run {} ({}) became AVAILABLE on {} while run {other_id} ({}) was active (event {})",
                            e.run_id,
                            kind(me.exclusive),
                            me.target,
                            kind(other.exclusive),
                            e.id
                        );
                    }
                }
                if let Some(limit) = me.limit {
                    let in_plan = active
                        .iter()
                        .filter(|id| facts[id].plan_id == me.plan_id)
                        .count() as i64;
                    assert!(
                        in_plan < limit,
                        "invariant 2: plan {} had {in_plan} active runs (limit {limit}) when run {} was promoted (event {})",
                        me.plan_id,
                        e.run_id,
                        e.id
                    );
                }
                if let Some(v) = &me.version {
                    for other_id in &live {
                        let other = &facts[other_id];
                        if other.target == me.target
                            && let Some(ov) = &other.version
                        {
                            assert!(
                                version::compare(ov, v) != Ordering::Less,
                                "invariant 3: run {} (version {v}) started on {} while run {other_id} (version {ov}) was not finished (event {})",
                                e.run_id,
                                me.target,
                                e.id
                            );
                        }
                    }
                }
                active.insert(e.run_id);
            }
            (Some(RunStatus::Available), RunStatus::Running) => {
                *running_events.entry(e.run_id).or_default() += 1;
            }
            (_, to) if to.is_terminal() => {
                active.remove(&e.run_id);
                live.remove(&e.run_id);
                if to == RunStatus::Done {
                    *done_events.entry(e.run_id).or_default() += 1;
                }
            }
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

fn kind(exclusive: bool) -> &'static str {
    if exclusive { "exclusive" } else { "shared" }
}
