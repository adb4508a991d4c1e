//! A plan whose dependencies contradict its version order: task `b`
//! (version 1 on `db/x`) runs after `a` (version 2 on `db/x`), but the
//! version gate holds `a` while the smaller `b` is still to run. Neither
//! would ever start, and every later version on the target would wait
//! behind them, each with an ordinary-looking waiting cause (a hostile
//! trial stranded 88 tasks across 12 plans this way). Refused at submit,
//! naming both tasks.

use std::cmp::Ordering;
use std::collections::HashMap;

use super::{InvalidPlan, NewTask};
use domain::version;

/// Steps of work (tasks plus dependencies, per target checked) past which
/// the check is not made: only a plan built to be absurd gets there, and
/// it must not cost a submit seconds of CPU.
const MAX_STEPS: usize = 20_000_000;

/// Refuses `tasks` when one runs after a larger version of its own target.
pub(super) fn check(tasks: &[NewTask]) -> Result<(), InvalidPlan> {
    let mut versioned: HashMap<&str, usize> = HashMap::new();
    for task in tasks.iter().filter(|t| t.version.is_some()) {
        *versioned.entry(task.target.as_str()).or_default() += 1;
    }
    let targets: Vec<&str> = versioned
        .into_iter()
        .filter(|&(_, n)| n >= 2)
        .map(|(target, _)| target)
        .collect();
    let edges: usize = tasks.iter().map(|t| t.depends_on.len()).sum();
    if targets.is_empty()
        || edges == 0
        || targets.len().saturating_mul(tasks.len() + edges) > MAX_STEPS
    {
        return Ok(());
    }
    let order = topological(tasks);
    for target in targets {
        // The largest version on `target` among each task's ancestors, and
        // which task holds it.
        let mut above: Vec<Option<usize>> = vec![None; tasks.len()];
        for &i in &order {
            let mut best: Option<usize> = None;
            for &p in &tasks[i].depends_on {
                let own = (tasks[p].target == target && tasks[p].version.is_some()).then_some(p);
                for candidate in [own, above[p]].into_iter().flatten() {
                    if best.is_none_or(|b| larger(&tasks[candidate], &tasks[b])) {
                        best = Some(candidate);
                    }
                }
            }
            above[i] = best;
            let task = &tasks[i];
            if task.target != target || task.version.is_none() {
                continue;
            }
            if let Some(a) = best.filter(|&a| larger(&tasks[a], task)) {
                return Err(InvalidPlan {
                    message: format!(
                        "task `{}` (version {} on {target}) runs after `{}` (version {}), but \
                         the version order holds `{}` until every smaller version on {target} \
                         has run: neither would ever start. Give `{}` the larger version, or \
                         drop the dependency",
                        task.name,
                        task.version.as_deref().unwrap_or_default(),
                        tasks[a].name,
                        tasks[a].version.as_deref().unwrap_or_default(),
                        tasks[a].name,
                        task.name,
                    ),
                    field: Some(format!("tasks[{i}].depends_on")),
                });
            }
        }
    }
    Ok(())
}

fn larger(a: &NewTask, b: &NewTask) -> bool {
    match (&a.version, &b.version) {
        (Some(x), Some(y)) => version::compare(x, y) == Ordering::Greater,
        _ => false,
    }
}

/// Task indexes with every task after its dependencies (the graph was
/// checked for cycles already).
fn topological(tasks: &[NewTask]) -> Vec<usize> {
    let mut waiting: Vec<usize> = tasks.iter().map(|t| t.depends_on.len()).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); tasks.len()];
    for (i, task) in tasks.iter().enumerate() {
        for &p in &task.depends_on {
            dependents[p].push(i);
        }
    }
    let mut order: Vec<usize> = (0..tasks.len()).filter(|&i| waiting[i] == 0).collect();
    let mut next = 0;
    while next < order.len() {
        let i = order[next];
        next += 1;
        for &d in &dependents[i] {
            waiting[d] -= 1;
            if waiting[d] == 0 {
                order.push(d);
            }
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    fn refusal(plan: serde_json::Value) -> Option<(String, Option<String>)> {
        crate::plan::parse_value(plan)
            .err()
            .map(|e| (e.message, e.field))
    }

    #[test]
    fn a_dependency_against_the_version_order_is_refused() {
        let (message, field) = refusal(json!({"name": "p", "tasks": [
            {"name": "a", "target": "db/dl", "version": "2", "sleep": "0s"},
            {"name": "b", "target": "db/dl", "version": "1", "depends_on": ["a"], "sleep": "0s"}]}))
        .expect("refused");
        assert_eq!(field.as_deref(), Some("tasks[1].depends_on"));
        assert!(
            message.contains("task `b` (version 1 on db/dl) runs after `a` (version 2)"),
            "{message}"
        );
        // Through a task on another target, and through stage order.
        assert!(refusal(json!({"name": "p", "tasks": [
            {"name": "a", "target": "db/dl", "version": "0042", "sleep": "0s"},
            {"name": "m", "target": "other", "depends_on": ["a"], "sleep": "0s"},
            {"name": "b", "target": "db/dl", "version": "0041", "depends_on": ["m"], "sleep": "0s"}]}))
        .is_some());
        assert!(
            refusal(json!({"name": "p",
            "stages": [{"name": "one"}, {"name": "two"}],
            "tasks": [
            {"name": "a", "target": "db/dl", "version": "1.10", "stage": "one", "sleep": "0s"},
            {"name": "b", "target": "db/dl", "version": "1.9", "stage": "two", "sleep": "0s"}]}))
            .is_some()
        );
    }

    #[test]
    fn versions_in_dependency_order_and_other_targets_pass() {
        for plan in [
            json!({"name": "p", "tasks": [
                {"name": "a", "target": "db/dl", "version": "1", "sleep": "0s"},
                {"name": "b", "target": "db/dl", "version": "2", "depends_on": ["a"], "sleep": "0s"},
                {"name": "c", "target": "db/dl", "version": "2", "depends_on": ["b"], "sleep": "0s"}]}),
            json!({"name": "p", "tasks": [
                {"name": "a", "target": "db/one", "version": "9", "sleep": "0s"},
                {"name": "b", "target": "db/two", "version": "1", "depends_on": ["a"], "sleep": "0s"},
                {"name": "c", "target": "db/dl", "depends_on": ["a"], "sleep": "0s"}]}),
        ] {
            assert_eq!(refusal(plan.clone()), None, "{plan}");
        }
    }
}
