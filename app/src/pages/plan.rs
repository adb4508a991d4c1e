//! `/plans/:id`: every task of one plan — status, where it runs, why it
//! waits, how it failed — with the actions that apply, and the plan's
//! notification state.

use chrono::{DateTime, Utc};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};

use crate::components::actions::{Act, ActionButton, ActionResult};
use crate::components::live::{REFRESH_EVERY, use_tick};
use crate::components::loaded::loaded;
use crate::components::notice::EmptyState;
use crate::components::status::{PlanStatusBadge, ProgressBar, TaskStatusBadge};
use crate::components::tables::{DataTable, DeliveryTable, LINK, TD};
use crate::components::time::{Ago, MaybeAgo, duration, exact};
use crate::error::DashboardError;
use crate::model::{PlanView, TaskStatus, TaskView};
use crate::views::{Action, PlanPage, TASKS_PER_PAGE};

#[server(prefix = "/_fn", endpoint = "plan")]
pub async fn load_plan(id: i64, page: i64) -> Result<PlanPage, DashboardError> {
    let offset = page.clamp(1, MAX_TASK_PAGE).saturating_sub(1) * TASKS_PER_PAGE;
    crate::backend::source()?.plan(id, offset).await
}

/// Page numbers past any plan's last page are clamped to this, so the
/// offset cannot overflow.
const MAX_TASK_PAGE: i64 = 1_000_000;

/// The id in the path; anything else is a plan that cannot exist.
pub fn path_id(text: Option<String>) -> i64 {
    text.and_then(|t| t.parse::<i64>().ok()).unwrap_or(0)
}

#[component]
pub fn PlanDetailPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || path_id(params.read().get("id"));
    let query = use_query_map();
    let page = move || {
        query
            .read()
            .get("page")
            .and_then(|p| p.parse::<i64>().ok())
            .unwrap_or(1)
            .clamp(1, MAX_TASK_PAGE)
    };
    let action = ServerAction::<Act>::new();
    let tick = use_tick(REFRESH_EVERY);
    let data = Resource::new(
        move || (id(), page(), tick.get(), action.version().get()),
        |(id, page, _, _)| load_plan(id, page),
    );
    view! {
        <section class="space-y-5">
            <ActionResult action />
            {loaded(data, move |p| view! { <PlanBody p action /> }.into_any())}
        </section>
    }
}

#[component]
fn PlanBody(p: PlanPage, action: ServerAction<Act>) -> impl IntoView {
    let PlanPage {
        now,
        plan,
        task_counts: counts,
        tasks_total,
        tasks_offset,
        deliveries,
    } = p;
    let has = |wanted: &[TaskStatus]| wanted.iter().any(|s| counts.get(s).is_some_and(|n| *n > 0));
    let can_run = has(&[TaskStatus::NotStarted]);
    let can_retry = has(&[TaskStatus::Failed, TaskStatus::Canceled]);
    let can_cancel = has(&[
        TaskStatus::Pending,
        TaskStatus::Available,
        TaskStatus::Running,
    ]);
    let shown = plan.tasks.len() as i64;
    let subject = format!("plan {}", plan.name);
    let limit = plan
        .parallel_limit
        .map(|n| format!("at most {n} at once"))
        .unwrap_or_else(|| "no parallel limit".to_owned());
    let description = (!plan.description.is_empty())
        .then(|| view! { <p class="max-w-3xl text-slate-700">{plan.description.clone()}</p> });
    let PlanView {
        id,
        name,
        status,
        created_at,
        created_by,
        notification,
        tasks,
        ..
    } = plan;
    let deliveries = if deliveries.is_empty() {
        view! {
            <EmptyState id="plan-deliveries-empty">
                "No webhook delivery for this plan. One is sent when the plan fails or completes, to BATON_WEBHOOK_URL and the plan's own webhooks."
            </EmptyState>
        }
        .into_any()
    } else {
        view! { <DeliveryTable deliveries now hide_plan=true /> }.into_any()
    };
    let claim = match notification {
        Some(n) => {
            let event = n.event.clone();
            view! {
                <p id="notification-state" data-event=event>
                    <span class="font-medium">{n.event}</span>
                    " claimed "
                    <Ago at=n.claimed_at now />
                    ". A Retry clears it, so the next outcome is notified again."
                </p>
            }
            .into_any()
        }
        None => view! {
            <p id="notification-state" data-event="">
                "No notification claimed for this phase yet: one is sent when the plan fails or completes."
            </p>
        }
        .into_any(),
    };
    view! {
        <Title text=format!("{name} · Baton") />
        <header class="space-y-2">
            <nav aria-label="Breadcrumb" class="text-sm">
                <a class=LINK href="/plans">"Plans"</a>
                <span class="text-slate-500">{format!(" / plan {id}")}</span>
            </nav>
            <div class="flex flex-wrap items-center gap-3">
                <h1 id="plan-name" class="text-2xl font-semibold tracking-tight break-all">{name}</h1>
                <span id="plan-status"><PlanStatusBadge status /></span>
            </div>
            {description}
            <p class="text-sm text-slate-600">
                "Submitted " <Ago at=created_at now /> {format!(" by {created_by}; {limit}.")}
            </p>
        </header>
        <div class="flex flex-wrap items-center gap-2" id="plan-actions">
            <ActionButton action kind=Action::PlanRun id enabled=can_run label="Run" subject=subject.clone() />
            <ActionButton action kind=Action::PlanRetry id enabled=can_retry label="Retry failed" subject=subject.clone() />
            <ActionButton
                action
                kind=Action::PlanCancel
                id
                enabled=can_cancel
                label="Cancel plan"
                subject=subject
                confirm="Cancel every pending, ready and running task of this plan? Running commands are killed."
            />
        </div>
        <ProgressBar counts />
        <TaskPager id tasks_total tasks_offset shown />
        <TaskTable tasks now action />
        <section class="space-y-2">
            <h2 class="text-lg font-semibold">"Notifications"</h2>
            {claim}
            {deliveries}
        </section>
    }
}

/// Which tasks the table shows, with links to the pages around when the
/// plan has more than one page of them.
#[component]
fn TaskPager(id: i64, tasks_total: i64, tasks_offset: i64, shown: i64) -> impl IntoView {
    if tasks_total <= TASKS_PER_PAGE {
        return ().into_any();
    }
    let page = tasks_offset / TASKS_PER_PAGE + 1;
    let href = move |page: i64| format!("/plans/{id}?page={page}");
    let previous =
        (page > 1).then(|| view! { <a class=LINK rel="prev" href=href(page - 1)>"← Previous"</a> });
    let next = (tasks_offset + shown < tasks_total)
        .then(|| view! { <a class=LINK rel="next" href=href(page + 1)>"Next →"</a> });
    view! {
        <nav id="tasks-pager" aria-label="Task pages" class="flex flex-wrap items-center gap-4 text-sm">
            <span class="text-slate-600">
                {format!("Tasks {}–{} of {tasks_total}", tasks_offset + 1, tasks_offset + shown)}
            </span>
            {previous}
            {next}
        </nav>
    }
    .into_any()
}

#[component]
fn TaskTable(tasks: Vec<TaskView>, now: DateTime<Utc>, action: ServerAction<Act>) -> impl IntoView {
    if tasks.is_empty() {
        return view! { <EmptyState id="tasks-empty">"This plan has no tasks."</EmptyState> }
            .into_any();
    }
    let rows = tasks
        .into_iter()
        .map(|task| view! { <TaskRow task now action /> })
        .collect_view();
    let columns = vec![
        "Task",
        "Status",
        "Target",
        "Version",
        "Attempt",
        "Replica",
        "Started",
        "Duration",
        "Error / waiting for",
        "Actions",
    ];
    view! {
        <DataTable id="tasks" caption="Tasks of this plan" columns>
            {rows}
        </DataTable>
    }
    .into_any()
}

#[component]
fn TaskRow(task: TaskView, now: DateTime<Utc>, action: ServerAction<Act>) -> impl IntoView {
    let status = task.status;
    let subject = format!("task {}", task.name);
    let name = match task.run_id {
        Some(run) => {
            view! { <a class=LINK href=format!("/runs/{run}")>{task.name.clone()}</a> }.into_any()
        }
        None => view! { <span>{task.name.clone()}</span> }.into_any(),
    };
    let target = if task.exclusive {
        view! { <span>{task.target}</span> }.into_any()
    } else {
        view! {
            <span>
                {task.target}
                <span class="ml-1 text-xs text-slate-600" title="non-exclusive: shares the target">"shared"</span>
            </span>
        }
        .into_any()
    };
    let took = task.started_at.map(|start| {
        let end = task.finished_at.unwrap_or(now);
        view! { <span title=exact(start)>{duration(start, end)}</span> }
    });
    // A PENDING task's cause is the most useful thing on the row: say it
    // loudly. Otherwise the error of the latest run, if any.
    let note = match (status, task.waiting_cause, task.error) {
        (TaskStatus::Pending, Some(cause), _) => view! {
            <p class="waiting-cause rounded-sm bg-amber-50 px-2 py-1 font-medium text-amber-900 ring-1 ring-amber-300">
                {cause}
            </p>
        }
        .into_any(),
        (_, _, Some(error)) => view! { <p class="task-error font-mono text-xs break-words text-red-800">{error}</p> }.into_any(),
        _ => view! { <span class="text-slate-500">"—"</span> }.into_any(),
    };
    let node = task.node.map(
        |n| view! { <span class="block text-xs text-slate-600">{format!("pinned to {n}")}</span> },
    );
    view! {
        <tr data-task-id=task.id data-task-name=task.name.clone() data-status=status.as_str()>
            <td class=format!("{TD} font-medium")>{name}</td>
            <td class=TD><TaskStatusBadge status /></td>
            <td class=TD>{target}{node}</td>
            <td class=format!("{TD} font-mono")>{task.version.unwrap_or_else(|| "—".into())}</td>
            <td class=format!("{TD} tabular-nums")>{task.attempt.map(|a| a.to_string()).unwrap_or_else(|| "—".into())}</td>
            <td class=format!("{TD} font-mono text-xs")>{task.replica_id.unwrap_or_else(|| "—".into())}</td>
            <td class=TD><MaybeAgo at=task.started_at now /></td>
            <td class=format!("{TD} whitespace-nowrap")>{took}</td>
            <td class=format!("{TD} max-w-md")>{note}</td>
            <td class=TD>
                <div class="flex flex-wrap gap-1">
                    <ActionButton
                        action
                        kind=Action::TaskRetry
                        id=task.id
                        enabled=matches!(status, TaskStatus::Failed | TaskStatus::Canceled)
                        label="Retry"
                        subject=subject.clone()
                    />
                    <ActionButton
                        action
                        kind=Action::TaskCancel
                        id=task.id
                        enabled=status.is_active()
                        label="Cancel"
                        subject=subject.clone()
                        confirm="Cancel this task? A running command is killed."
                    />
                    <ActionButton
                        action
                        kind=Action::TaskSkip
                        id=task.id
                        enabled=matches!(status, TaskStatus::NotStarted | TaskStatus::Failed | TaskStatus::Canceled)
                        label="Skip"
                        subject
                        confirm="Skip this task? It counts as complete without running."
                    />
                </div>
            </td>
        </tr>
    }
}
