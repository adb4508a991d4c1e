//! The plan page's graph: each task a box linked to its row, in columns
//! by dependency depth (a task stands right of every task it runs after),
//! with an arrow per dependency. Server-rendered HTML over an inline SVG
//! of the arrows; no script, no layout library.
//!
//! The page draws it only for small plans (`views::graph_drawn`): a tall
//! column wraps into several, but past a few hundred boxes and a thousand
//! arrows a drawing says less than the table.

use std::collections::HashMap;

use leptos::prelude::*;

use crate::components::status::task_status_class;
use domain::model::{StageView, TaskView};

/// A box's size and the space between boxes, in CSS pixels.
const NODE_W: usize = 176;
const NODE_H: usize = 28;
const GAP_X: usize = 40;
const GAP_Y: usize = 8;
/// Boxes of one depth stacked before the column wraps into the next.
const ROWS: usize = 16;

/// Where each task's box goes.
#[derive(Debug, PartialEq)]
pub struct Layout {
    /// One per task, in the order of the tasks given.
    pub nodes: Vec<Node>,
    /// (dependency, dependent) as indexes into the tasks given.
    pub edges: Vec<(usize, usize)>,
    pub width: usize,
    pub height: usize,
}

#[derive(Debug, PartialEq)]
pub struct Node {
    /// Longest chain of dependencies before the task (0: it waits for none).
    pub depth: usize,
    pub x: usize,
    pub y: usize,
}

/// Lays out `tasks` (every task of the plan): depth by longest path, then
/// each depth's tasks in stage order (tasks without a stage last), then
/// in the plan's order. Names a task depends on that are not among
/// `tasks` are left out; a cycle, which validation refuses, would leave
/// its tasks at depth 0 rather than loop.
pub fn layout(tasks: &[TaskView], stages: &[StageView]) -> Layout {
    let index: HashMap<&str, usize> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    let edges: Vec<(usize, usize)> = tasks
        .iter()
        .enumerate()
        .flat_map(|(i, t)| {
            t.depends_on
                .iter()
                .filter_map(|name| index.get(name.as_str()))
                .map(move |&dep| (dep, i))
        })
        .collect();

    // Kahn's algorithm: a task's depth is settled once every task it
    // depends on has been visited.
    let mut waiting_on = vec![0usize; tasks.len()];
    let mut dependents = vec![Vec::new(); tasks.len()];
    for &(dep, task) in &edges {
        waiting_on[task] += 1;
        dependents[dep].push(task);
    }
    let mut depth = vec![0usize; tasks.len()];
    let mut ready: Vec<usize> = (0..tasks.len()).filter(|&i| waiting_on[i] == 0).collect();
    while let Some(done) = ready.pop() {
        for &next in &dependents[done] {
            depth[next] = depth[next].max(depth[done] + 1);
            waiting_on[next] -= 1;
            if waiting_on[next] == 0 {
                ready.push(next);
            }
        }
    }

    let stage_rank = |task: &TaskView| {
        task.stage
            .as_deref()
            .and_then(|s| stages.iter().position(|st| st.name == s))
            .unwrap_or(stages.len())
    };
    let deepest = depth.iter().copied().max().unwrap_or(0);
    let mut columns: Vec<Vec<usize>> = vec![Vec::new(); deepest + 1];
    for (i, &d) in depth.iter().enumerate() {
        columns[d].push(i);
    }
    let mut nodes: Vec<Option<Node>> = (0..tasks.len()).map(|_| None).collect();
    let (mut column, mut tallest) = (0, 0);
    for mut members in columns {
        members.sort_by_key(|&i| (stage_rank(&tasks[i]), i));
        for chunk in members.chunks(ROWS) {
            for (row, &i) in chunk.iter().enumerate() {
                nodes[i] = Some(Node {
                    depth: depth[i],
                    x: column * (NODE_W + GAP_X),
                    y: row * (NODE_H + GAP_Y),
                });
            }
            tallest = tallest.max(chunk.len());
            column += 1;
        }
    }
    let span = |n: usize, size: usize, gap: usize| (n * (size + gap)).saturating_sub(gap);
    Layout {
        nodes: nodes.into_iter().flatten().collect(),
        edges,
        width: span(column, NODE_W, GAP_X),
        height: span(tallest, NODE_H, GAP_Y),
    }
}

/// The drawing: `tasks` must be every task of the plan.
#[component]
pub fn PlanGraph(tasks: Vec<TaskView>, stages: Vec<StageView>) -> impl IntoView {
    let Layout {
        nodes,
        edges,
        width,
        height,
    } = layout(&tasks, &stages);
    // An arrow from the right edge of the dependency's box to the left
    // edge of its dependent's, met (green) once the dependency completed.
    let arrow = |&(from, to): &(usize, usize)| {
        let (a, b) = (&nodes[from], &nodes[to]);
        let (x1, y1) = (a.x + NODE_W, a.y + NODE_H / 2);
        let (x2, y2) = (b.x, b.y + NODE_H / 2);
        let bend = (x2.saturating_sub(x1) / 2).max(GAP_X / 2);
        let line = format!(
            "M{x1} {y1}C{} {y1} {} {y2} {} {y2}",
            x1 + bend,
            x2.saturating_sub(bend),
            x2.saturating_sub(6)
        );
        (line, format!("M{x2} {y2}l-7 -4v8z"))
    };
    let (met, open): (Vec<_>, Vec<_>) = edges
        .iter()
        .partition(|&&(from, _)| tasks[from].status.is_complete());
    let paths = |edges: Vec<&(usize, usize)>| {
        edges
            .into_iter()
            .map(|e| {
                let (line, head) = arrow(e);
                view! {
                    <path d=line fill="none"></path>
                    <path d=head stroke="none"></path>
                }
            })
            .collect_view()
    };
    let met = paths(met);
    let open = paths(open);
    let boxes = tasks
        .iter()
        .zip(&nodes)
        .map(|(task, node)| {
            let stage = task
                .stage
                .as_ref()
                .map(|s| format!(", stage {s}"))
                .unwrap_or_default();
            let title = format!("{}: {}{stage}", task.name, task.status);
            view! {
                <a
                    href=format!("#task-{}", task.id)
                    class=format!("graph-node {}", task_status_class(task.status))
                    style=format!(
                        "left: {}px; top: {}px; width: {NODE_W}px; height: {NODE_H}px",
                        node.x,
                        node.y,
                    )
                    title=title
                    data-task-name=task.name.clone()
                    data-depth=node.depth
                >
                    <span class="truncate">{task.name.clone()}</span>
                </a>
            }
        })
        .collect_view();
    view! {
        <figure id="plan-graph" class="space-y-2">
            <div class="overflow-x-auto rounded-sm border border-slate-200 bg-white p-3">
                <div class="relative" style=format!("width: {width}px; height: {height}px")>
                    <svg
                        class="absolute top-0 left-0"
                        width=width
                        height=height
                        viewBox=format!("0 0 {width} {height}")
                        aria-hidden="true"
                    >
                        <g class="text-slate-400" fill="currentColor" stroke="currentColor" stroke-width="1.5">
                            {open}
                        </g>
                        <g class="text-emerald-600" fill="currentColor" stroke="currentColor" stroke-width="1.5">
                            {met}
                        </g>
                    </svg>
                    {boxes}
                </div>
            </div>
            <figcaption class="text-xs text-slate-600">
                "Each task stands right of the tasks it runs after; an arrow turns green once the task it leaves is DONE or SKIPPED. Select a task to go to its row."
            </figcaption>
        </figure>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::model::TaskStatus;

    fn task(name: &str, stage: Option<&str>, depends_on: &[&str]) -> TaskView {
        TaskView {
            id: 0,
            name: name.into(),
            target: "t".into(),
            exclusive: true,
            version: None,
            node: None,
            status: TaskStatus::NotStarted,
            attempt: None,
            run_id: None,
            replica_id: None,
            waiting_cause: None,
            started_at: None,
            finished_at: None,
            error: None,
            depends_on: depends_on.iter().map(|d| d.to_string()).collect(),
            dependents: Vec::new(),
            stage: stage.map(str::to_owned),
            approval: None,
            approvers: Vec::new(),
            approved_by: None,
            approved_at: None,
            cancel_requested_by: None,
            cancel_requested_at: None,
        }
    }

    #[test]
    fn a_task_stands_right_of_everything_it_runs_after() {
        // d waits for a directly and for c, which waits for b, which waits for a.
        let tasks = [
            task("d", None, &["a", "c"]),
            task("c", None, &["b"]),
            task("b", None, &["a"]),
            task("a", None, &[]),
        ];
        let l = layout(&tasks, &[]);
        let depths: Vec<usize> = l.nodes.iter().map(|n| n.depth).collect();
        assert_eq!(depths, [3, 2, 1, 0]);
        assert_eq!(l.edges, [(3, 0), (1, 0), (2, 1), (3, 2)]);
        for &(from, to) in &l.edges {
            assert!(l.nodes[from].x < l.nodes[to].x, "{from} -> {to}");
        }
        assert_eq!(l.width, 4 * NODE_W + 3 * GAP_X);
        assert_eq!(l.height, NODE_H);
    }

    #[test]
    fn a_depth_lists_its_tasks_in_stage_order_and_wraps_when_tall() {
        let stages = [
            StageView {
                name: "first".into(),
                approval: None,
            },
            StageView {
                name: "second".into(),
                approval: Some("required".into()),
            },
        ];
        let tasks = [
            task("loose", None, &[]),
            task("late", Some("second"), &[]),
            task("early", Some("first"), &[]),
        ];
        let l = layout(&tasks, &stages);
        let ys: Vec<usize> = l.nodes.iter().map(|n| n.y).collect();
        assert_eq!(ys, [2 * (NODE_H + GAP_Y), NODE_H + GAP_Y, 0]);

        let many: Vec<TaskView> = (0..ROWS + 1)
            .map(|i| task(&format!("t{i}"), None, &[]))
            .collect();
        let l = layout(&many, &[]);
        assert_eq!(
            l.nodes[ROWS].x,
            NODE_W + GAP_X,
            "the 17th box starts a column"
        );
        assert_eq!(l.nodes[ROWS].y, 0);
        assert_eq!(l.height, ROWS * (NODE_H + GAP_Y) - GAP_Y);
    }

    #[test]
    fn unknown_names_and_cycles_never_loop() {
        let tasks = [
            task("a", None, &["b", "elsewhere"]),
            task("b", None, &["a"]),
        ];
        let l = layout(&tasks, &[]);
        assert_eq!(l.nodes.len(), 2);
        assert_eq!(l.edges, [(1, 0), (0, 1)]);
        assert!(layout(&[], &[]).nodes.is_empty());
    }
}
