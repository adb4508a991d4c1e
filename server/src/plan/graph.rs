//! A plan's dependency graph: `depends_on` names and `stages` resolved to
//! task indexes, refused when a name is unknown, a task names itself, or
//! the dependencies close a cycle (named, so the operator can break it).
//!
//! Everything here is linear in tasks plus dependencies: a 10,000-task
//! chain or a task waiting for 5,000 others resolves in one pass.

use std::collections::{HashMap, HashSet};

use super::limits;
use super::{Approval, InvalidPlan, Stage};

/// What one task file says about its place in the graph.
pub(super) struct TaskLinks<'a> {
    pub name: &'a str,
    pub depends_on: &'a [String],
    pub stage: Option<&'a str>,
}

/// A stage as the file declared it, approval already validated.
pub(super) struct StageDecl {
    pub name: String,
    pub approval: Option<Approval>,
}

/// Each task's dependencies as indexes (its own `depends_on` first, then
/// its stage's predecessors), and the stage each task belongs to.
pub(super) struct Resolved {
    pub depends_on: Vec<Vec<usize>>,
    pub stages: Vec<Stage>,
    /// Index into `stages` per task.
    pub stage_of: Vec<Option<usize>>,
}

fn invalid(field: String, message: impl Into<String>) -> InvalidPlan {
    InvalidPlan {
        message: message.into(),
        field: Some(field),
    }
}

pub(super) fn resolve(
    tasks: &[TaskLinks],
    stages: Vec<StageDecl>,
) -> Result<Resolved, InvalidPlan> {
    // Most plans use neither: skip the name index and the cycle search
    // that every submit would otherwise pay for.
    if stages.is_empty()
        && tasks
            .iter()
            .all(|t| t.depends_on.is_empty() && t.stage.is_none())
    {
        return Ok(Resolved {
            depends_on: vec![Vec::new(); tasks.len()],
            stages: Vec::new(),
            stage_of: vec![None; tasks.len()],
        });
    }
    let index: HashMap<&str, usize> = tasks.iter().enumerate().map(|(i, t)| (t.name, i)).collect();
    let stage_index = stage_names(&stages)?;
    let mut stage_of = Vec::with_capacity(tasks.len());
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); stages.len()];
    for (i, task) in tasks.iter().enumerate() {
        let Some(stage) = task.stage else {
            stage_of.push(None);
            continue;
        };
        let Some(&s) = stage_index.get(stage) else {
            let known: Vec<&str> = stages.iter().map(|s| s.name.as_str()).collect();
            let known = if known.is_empty() {
                "the plan declares no `stages`".to_owned()
            } else {
                format!("the plan's stages are {}", known.join(", "))
            };
            return Err(invalid(
                format!("tasks[{i}].stage"),
                format!("no stage named `{stage}`; {known}"),
            ));
        };
        stage_of.push(Some(s));
        members[s].push(i);
    }
    if let Some(empty) = members.iter().position(Vec::is_empty) {
        return Err(invalid(
            format!("stages[{empty}]"),
            format!(
                "stage `{}` has no tasks; give a task `stage: {}` or remove the stage",
                stages[empty].name, stages[empty].name
            ),
        ));
    }

    let mut depends_on = Vec::with_capacity(tasks.len());
    let mut edges = 0usize;
    for (i, task) in tasks.iter().enumerate() {
        let mut mine = Vec::with_capacity(task.depends_on.len());
        let mut seen = HashSet::with_capacity(task.depends_on.len());
        for (j, name) in task.depends_on.iter().enumerate() {
            let field = || format!("tasks[{i}].depends_on[{j}]");
            let name = name.trim();
            let Some(&d) = index.get(name) else {
                return Err(invalid(
                    field(),
                    format!("no task named `{name}` in this plan"),
                ));
            };
            if d == i {
                return Err(invalid(field(), "a task cannot depend on itself"));
            }
            if !seen.insert(d) {
                return Err(invalid(field(), format!("`{name}` is named twice")));
            }
            mine.push(d);
        }
        if let Some(s) = stage_of[i].filter(|&s| s > 0) {
            mine.extend(members[s - 1].iter().filter(|d| seen.insert(**d)));
        }
        edges += mine.len();
        depends_on.push(mine);
    }
    if edges > limits::MAX_DEPENDENCIES {
        return Err(invalid(
            "tasks".to_owned(),
            format!(
                "the plan has {edges} dependencies (a stage depends on every task of the stage \
                 before it); at most {} are allowed: use fewer, larger stages or split the plan",
                limits::MAX_DEPENDENCIES
            ),
        ));
    }
    if let Some(cycle) = find_cycle(&depends_on) {
        // Point at an edge the operator wrote in `depends_on` when there is
        // one; a cycle made only of stages cannot happen (stages are ordered).
        let start = (0..cycle.len())
            .find(|&k| {
                let (from, to) = (cycle[k], cycle[(k + 1) % cycle.len()]);
                tasks[from]
                    .depends_on
                    .iter()
                    .any(|n| n.trim() == tasks[to].name)
            })
            .unwrap_or(0);
        let mut names: Vec<&str> = (0..cycle.len())
            .map(|k| tasks[cycle[(start + k) % cycle.len()]].name)
            .collect();
        names.push(names[0]);
        return Err(invalid(
            format!("tasks[{}].depends_on", cycle[start]),
            format!("cycle {}", names.join(" → ")),
        ));
    }
    let stages = stages
        .into_iter()
        .map(|s| Stage {
            name: s.name,
            approval: s.approval,
        })
        .collect();
    Ok(Resolved {
        depends_on,
        stages,
        stage_of,
    })
}

fn stage_names(stages: &[StageDecl]) -> Result<HashMap<&str, usize>, InvalidPlan> {
    let mut index = HashMap::with_capacity(stages.len());
    for (s, stage) in stages.iter().enumerate() {
        if index.insert(stage.name.as_str(), s).is_some() {
            return Err(invalid(
                format!("stages[{s}].name"),
                format!("stage name `{}` is used twice in this plan", stage.name),
            ));
        }
    }
    Ok(index)
}

/// A cycle as task indexes, each depending on the next (and the last on
/// the first), or `None`. Kahn's algorithm removes every task whose
/// dependencies are all removed; each task left waits for another task
/// left, so walking from any of them along its waits must repeat.
fn find_cycle(depends_on: &[Vec<usize>]) -> Option<Vec<usize>> {
    let n = depends_on.len();
    let mut waiting: Vec<usize> = depends_on.iter().map(Vec::len).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (task, deps) in depends_on.iter().enumerate() {
        for &d in deps {
            dependents[d].push(task);
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&t| waiting[t] == 0).collect();
    let mut removed = vec![false; n];
    while let Some(t) = ready.pop() {
        removed[t] = true;
        for &after in &dependents[t] {
            waiting[after] -= 1;
            if waiting[after] == 0 {
                ready.push(after);
            }
        }
    }
    let first = removed.iter().position(|r| !r)?;
    let mut at_step: HashMap<usize, usize> = HashMap::new();
    let mut walk = Vec::new();
    let mut t = first;
    loop {
        if let Some(&step) = at_step.get(&t) {
            return Some(walk.split_off(step));
        }
        at_step.insert(t, walk.len());
        walk.push(t);
        t = *depends_on[t]
            .iter()
            .find(|&&d| !removed[d])
            .expect("a task left by Kahn's algorithm waits for another task left");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links<'a>(spec: &'a [(&'a str, Vec<String>)]) -> Vec<TaskLinks<'a>> {
        spec.iter()
            .map(|(name, deps)| TaskLinks {
                name,
                depends_on: deps,
                stage: None,
            })
            .collect()
    }

    fn deps(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_cycle_is_named_from_an_edge_the_operator_wrote() {
        let spec = [
            ("x", deps(&[])),
            ("a", deps(&["b"])),
            ("b", deps(&["c"])),
            ("c", deps(&["a", "x"])),
        ];
        let err = resolve(&links(&spec), Vec::new()).err().unwrap();
        assert_eq!(err.field.as_deref(), Some("tasks[1].depends_on"));
        assert_eq!(err.message, "cycle a → b → c → a");
    }

    #[test]
    fn unknown_self_and_twice_named_dependencies_are_refused() {
        let cases = [
            (
                deps(&["nope"]),
                "tasks[0].depends_on[0]",
                "no task named `nope`",
            ),
            (deps(&["a"]), "tasks[0].depends_on[0]", "itself"),
            (deps(&["b", "b"]), "tasks[0].depends_on[1]", "named twice"),
        ];
        for (d, field, words) in cases {
            let spec = [("a", d), ("b", deps(&[]))];
            let err = resolve(&links(&spec), Vec::new()).err().unwrap();
            assert_eq!(err.field.as_deref(), Some(field));
            assert!(err.message.contains(words), "{}", err.message);
        }
    }

    #[test]
    fn stages_depend_on_every_task_of_the_stage_before() {
        let names = ["m1", "m2", "d1", "smoke"];
        let stage = ["migrate", "migrate", "deploy", "deploy"];
        let none: Vec<String> = Vec::new();
        let tasks: Vec<TaskLinks> = names
            .iter()
            .zip(stage)
            .map(|(name, s)| TaskLinks {
                name,
                depends_on: &none,
                stage: Some(s),
            })
            .collect();
        let decl = |name: &str| StageDecl {
            name: name.into(),
            approval: None,
        };
        let r = resolve(&tasks, vec![decl("migrate"), decl("deploy")]).unwrap();
        assert_eq!(r.depends_on, vec![vec![], vec![], vec![0, 1], vec![0, 1]]);
        assert_eq!(r.stage_of, vec![Some(0), Some(0), Some(1), Some(1)]);

        let err = resolve(
            &tasks,
            vec![decl("migrate"), decl("deploy"), decl("verify")],
        )
        .err()
        .unwrap();
        assert_eq!(err.field.as_deref(), Some("stages[2]"));
        let err = resolve(&tasks, vec![decl("migrate")]).err().unwrap();
        assert_eq!(err.field.as_deref(), Some("tasks[2].stage"));
    }

    #[test]
    fn a_long_chain_and_a_wide_fan_in_resolve() {
        let chain: Vec<(String, Vec<String>)> = (0..10_000)
            .map(|i| {
                let deps = if i == 0 {
                    vec![]
                } else {
                    vec![format!("t{}", i - 1)]
                };
                (format!("t{i}"), deps)
            })
            .collect();
        let tasks: Vec<TaskLinks> = chain
            .iter()
            .map(|(n, d)| TaskLinks {
                name: n,
                depends_on: d,
                stage: None,
            })
            .collect();
        assert!(resolve(&tasks, Vec::new()).is_ok());

        let mut closed = chain.clone();
        closed[0].1 = vec!["t9999".into()];
        let tasks: Vec<TaskLinks> = closed
            .iter()
            .map(|(n, d)| TaskLinks {
                name: n,
                depends_on: d,
                stage: None,
            })
            .collect();
        let err = resolve(&tasks, Vec::new()).err().unwrap();
        assert!(err.message.starts_with("cycle t"), "{}", &err.message[..40]);
        assert_eq!(err.message.matches('→').count(), 10_000);
    }
}
