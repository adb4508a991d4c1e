//! Status badges: every status has its own colour (docs/design.md,
//! "Dashboard"), and AVAILABLE (ready, nobody has claimed it) must never be
//! mistaken for PENDING (blocked by a gate) or RUNNING (executing).
//!
//! Class lists are written out in full so the stylesheet generator, which
//! scans these sources for class names, finds every one of them.

use leptos::prelude::*;

use std::collections::BTreeMap;

use domain::model::{PlanStatus, RunStatus, TaskStatus};

/// A shortcut defined in style/encre-css.toml.
const BADGE: &str = "badge";

pub fn task_status_class(status: TaskStatus) -> &'static str {
    match status {
        TaskStatus::NotStarted => "bg-slate-100 text-slate-700 ring-1 ring-slate-300",
        TaskStatus::Pending => "bg-amber-100 text-amber-800 ring-1 ring-amber-300",
        TaskStatus::Available => "bg-cyan-100 text-cyan-800 ring-1 ring-cyan-300",
        TaskStatus::Running => "bg-blue-600 text-white ring-1 ring-blue-700",
        TaskStatus::Done => "bg-emerald-100 text-emerald-800 ring-1 ring-emerald-300",
        TaskStatus::Failed => "bg-red-100 text-red-800 ring-1 ring-red-300",
        TaskStatus::Canceled => "bg-orange-100 text-orange-800 ring-1 ring-orange-300",
        TaskStatus::Skipped => "bg-violet-100 text-violet-800 ring-1 ring-violet-300",
    }
}

/// A plan's status wears the colour of the task status of the same name;
/// a halted plan, that of a failure (it needs the same hands).
pub fn plan_status_class(status: PlanStatus) -> &'static str {
    task_status_class(match status {
        PlanStatus::NotStarted => TaskStatus::NotStarted,
        PlanStatus::Running => TaskStatus::Running,
        PlanStatus::Halted => TaskStatus::Failed,
        PlanStatus::Failed => TaskStatus::Failed,
        PlanStatus::Done => TaskStatus::Done,
        PlanStatus::Canceled => TaskStatus::Canceled,
    })
}

/// The solid colour of a status in bars and charts: the badge's hue, darker.
pub fn task_status_fill(status: TaskStatus) -> &'static str {
    match status {
        TaskStatus::NotStarted => "bg-slate-300",
        TaskStatus::Pending => "bg-amber-400",
        TaskStatus::Available => "bg-cyan-500",
        TaskStatus::Running => "bg-blue-600",
        TaskStatus::Done => "bg-emerald-500",
        TaskStatus::Failed => "bg-red-600",
        TaskStatus::Canceled => "bg-orange-500",
        TaskStatus::Skipped => "bg-violet-400",
    }
}

#[component]
pub fn TaskStatusBadge(status: TaskStatus) -> impl IntoView {
    view! {
        <span class=format!("{BADGE} {}", task_status_class(status)) data-status=status.as_str()>
            {status.as_str()}
        </span>
    }
}

/// Beside a RUNNING badge: an operator asked to cancel the run, and it
/// holds its target until its replica confirms the kill (docs/design.md,
/// "Operator actions"). Nothing when no cancel was asked for; callers pass
/// `None` once the run has ended.
#[component]
pub fn Canceling(by: Option<String>, at: Option<chrono::DateTime<chrono::Utc>>) -> impl IntoView {
    by.map(|by| {
        let when = at.map(|at| format!(" at {}", at.format("%Y-%m-%d %H:%M:%S UTC")));
        let title = format!(
            "{by} asked to cancel this run{}; it keeps its target until its replica confirms \
             the kill, or is found stale",
            when.unwrap_or_default()
        );
        view! {
            <span
                class=format!("{BADGE} canceling ml-1 {}", task_status_class(TaskStatus::Canceled))
                data-canceling-by=by
                title=title
            >
                "canceling"
            </span>
        }
    })
}

/// A run's status wears the colour of the task status of the same name.
#[component]
pub fn RunStatusBadge(status: RunStatus) -> impl IntoView {
    view! { <TaskStatusBadge status=TaskStatus::from(status) /> }
}

/// A plan's tasks as one bar, a segment per status in the order a task
/// moves through them; the same numbers are written out for screen
/// readers and on hover.
#[component]
pub fn ProgressBar(counts: BTreeMap<TaskStatus, i64>) -> impl IntoView {
    let total: i64 = counts.values().sum();
    let summary = counts
        .iter()
        .map(|(status, n)| format!("{n} {status}"))
        .collect::<Vec<_>>()
        .join(", ");
    let segments = TaskStatus::PROGRESS_ORDER
        .into_iter()
        .filter_map(|status| {
            let n = counts.get(&status).copied().filter(|n| *n > 0)?;
            let width = n as f64 * 100.0 / total.max(1) as f64;
            Some(view! {
                <span
                    class=format!("block h-full {}", task_status_fill(status))
                    style=format!("width: {width:.2}%")
                    title=format!("{n} {status}")
                    data-status=status.as_str()
                ></span>
            })
        })
        .collect_view();
    view! {
        <div class="flex min-w-32 items-center gap-2">
            <div
                class="flex h-2.5 w-full overflow-hidden rounded-sm bg-slate-100"
                role="img"
                aria-label=format!("{total} tasks: {summary}")
                title=summary
            >
                {segments}
            </div>
        </div>
    }
}

#[component]
pub fn PlanStatusBadge(status: PlanStatus) -> impl IntoView {
    view! {
        <span class=format!("{BADGE} {}", plan_status_class(status)) data-status=status.as_str()>
            {status.as_str()}
        </span>
    }
}

/// `count` tasks in `status`, e.g. "AVAILABLE 3".
#[component]
pub fn TaskCountBadge(status: TaskStatus, count: i64) -> impl IntoView {
    view! {
        <span
            class=format!("{BADGE} gap-1 {}", task_status_class(status))
            title=status.as_str()
            data-status=status.as_str()
        >
            {status.as_str()}
            <span class="font-semibold tabular-nums">{count}</span>
        </span>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_status_has_its_own_colour() {
        let mut seen = std::collections::HashSet::new();
        let mut fills = std::collections::HashSet::new();
        for s in TaskStatus::ALL {
            assert!(seen.insert(task_status_class(s)), "{s} shares a colour");
            assert!(fills.insert(task_status_fill(s)), "{s} shares a bar colour");
        }
        assert_eq!(TaskStatus::PROGRESS_ORDER.len(), TaskStatus::ALL.len());
    }
}
