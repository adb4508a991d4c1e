//! `/plans/:id`: every task of one plan — status, where it runs, why it
//! waits, what it runs after and before, how it failed — grouped by
//! stage, with the plan's graph, the actions that apply (approve and
//! pause included), and the plan's notification state.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};

use crate::components::actions::{Act, ActionButton, ActionResult, TaskButtons};
use crate::components::definition::Definition;
use crate::components::feed::Feed;
use crate::components::graph::PlanGraph;
use crate::components::links::runs_with;
use crate::components::live::use_live;
use crate::components::loaded::loaded;
use crate::components::notice::EmptyState;
use crate::components::session::may_act;
use crate::components::status::{Canceling, PlanStatusBadge, ProgressBar, TaskStatusBadge};
use crate::components::tables::{DataTable, DeliveryTable, LINK, TBODY, TD};
use crate::components::time::{Ago, MaybeAgo, duration, exact};
use crate::error::DashboardError;
use domain::definition::TaskDefinition;
use domain::model::{PlanStatus, PlanView, StageView, TaskStatus, TaskView};
use domain::views::{
    Action, DEPENDENCY_NAMES, GRAPH_MAX_EDGES, GRAPH_MAX_TASKS, PlanPage, TASKS_PER_PAGE,
    TaskPlace, TieCounts, awaits_approval, graph_drawn,
};

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
    let live = use_live(move || Feed::Plan {
        id: id(),
        page: page(),
    });
    let data = Resource::new(
        move || (id(), page(), live.track(), action.version().get()),
        move |(id, page, _, _)| live.or_fetch(load_plan(id, page)),
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
        dependencies,
        awaiting_approval,
        elsewhere,
        cut,
        definitions,
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
        paused_by,
        paused_at,
        stages,
        tasks,
        ..
    } = plan;
    let finished = matches!(
        status,
        PlanStatus::Done | PlanStatus::Failed | PlanStatus::Canceled
    );
    let paused = paused_by.is_some();
    let banner = paused_by.map(|by| view! { <PausedBanner by at=paused_at /> });
    let approve_all = (awaiting_approval > 0).then(|| {
        view! {
            <ActionButton
                action
                kind=Action::PlanApprove
                id
                enabled=true
                label="Approve all waiting"
                subject=format!("{subject}: {awaiting_approval} tasks")
            />
        }
    });
    let brake = if paused {
        view! { <ActionButton action kind=Action::PlanResume id enabled=true label="Resume" subject=subject.clone() /> }
    } else {
        view! { <ActionButton action kind=Action::PlanPause id enabled=!finished label="Pause" subject=subject.clone() /> }
    };
    let graph = (dependencies > 0).then(|| {
        let drawing = if graph_drawn(tasks_total, dependencies) {
            view! { <PlanGraph tasks=tasks.clone() stages=stages.clone() /> }.into_any()
        } else {
            view! {
                <p id="plan-graph-omitted" class="text-sm text-slate-600">
                    {format!(
                        "This plan has {tasks_total} tasks and {dependencies} dependencies: the graph is drawn for plans of at most {GRAPH_MAX_TASKS} tasks and {GRAPH_MAX_EDGES} dependencies. The table says what each task runs after and before.",
                    )}
                </p>
            }
            .into_any()
        };
        view! {
            <section class="space-y-2">
                <h2 class="text-lg font-semibold">"Graph"</h2>
                {drawing}
            </section>
        }
    });
    let links = Links {
        plan: id,
        here: tasks.iter().map(|t| (t.name.clone(), t.id)).collect(),
        elsewhere,
    };
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
        {banner}
        <div class="flex flex-wrap items-center gap-2" id="plan-actions">
            <ActionButton action kind=Action::PlanRun id enabled=can_run label="Run" subject=subject.clone() />
            <ActionButton action kind=Action::PlanRetry id enabled=can_retry label="Retry failed" subject=subject.clone() />
            <ActionButton
                action
                kind=Action::PlanCancel
                id
                enabled=can_cancel
                label="Cancel plan"
                subject=subject.clone()
                confirm="Cancel every pending, ready and running task of this plan? Running commands are killed."
            />
            {approve_all}
            {brake}
            {may_act().then(|| view! {
                <a
                    id="submit-again"
                    class="rounded-sm px-3 py-1 text-sm font-medium text-blue-800 ring-1 ring-slate-300 hover:bg-slate-50"
                    href=format!("/plans/new?from={id}")
                >
                    "Submit again…"
                </a>
            })}
        </div>
        <ProgressBar counts />
        {graph}
        <TaskPager id tasks_total tasks_offset shown />
        <TaskTable tasks stages now action links cut definitions />
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

/// The plan's brake, said where nobody misses it.
#[component]
fn PausedBanner(by: String, at: Option<DateTime<Utc>>) -> impl IntoView {
    let at = at.map(|at| {
        view! {
            " at "
            <time datetime=at.to_rfc3339()>{exact(at)}</time>
        }
    });
    view! {
        <p id="plan-paused" role="status" class="rounded-sm border border-amber-300 bg-amber-50 px-3 py-2 text-sm text-amber-950">
            <strong class="font-semibold">{format!("Paused by {by}")}</strong>
            {at}
            ": no new run of this plan starts. Runs already ready or running carry on; Resume lets the others start."
        </p>
    }
}

/// Where a task named on the page is: its row here, or on another page.
struct Links {
    plan: i64,
    here: HashMap<String, i64>,
    elsewhere: BTreeMap<String, TaskPlace>,
}

impl Links {
    fn href(&self, name: &str) -> Option<String> {
        if let Some(id) = self.here.get(name) {
            return Some(format!("#task-{id}"));
        }
        let TaskPlace { id, page } = self.elsewhere.get(name)?;
        Some(format!("/plans/{}?page={page}#task-{id}", self.plan))
    }

    /// Up to [`DEPENDENCY_NAMES`] names, each linked to its row, and how
    /// many more of `total` there are.
    fn list(&self, names: &[String], total: usize) -> AnyView {
        let shown = names.len().min(DEPENDENCY_NAMES);
        let items = names[..shown]
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let sep = (i > 0).then_some(", ");
                let link = match self.href(name) {
                    Some(href) => view! { <a class=LINK href=href>{name.clone()}</a> }.into_any(),
                    None => view! { <span>{name.clone()}</span> }.into_any(),
                };
                view! { {sep} {link} }
            })
            .collect_view();
        let more = (total > shown).then(|| format!(" and {} more", total - shown));
        view! { {items} {more} }.into_any()
    }
}

#[component]
fn TaskTable(
    tasks: Vec<TaskView>,
    stages: Vec<StageView>,
    now: DateTime<Utc>,
    action: ServerAction<Act>,
    links: Links,
    cut: BTreeMap<i64, TieCounts>,
    definitions: Vec<TaskDefinition>,
) -> impl IntoView {
    let mut definitions: BTreeMap<i64, TaskDefinition> =
        definitions.into_iter().map(|d| (d.task_id, d)).collect();
    if tasks.is_empty() {
        return view! { <EmptyState id="tasks-empty">"This plan has no tasks."</EmptyState> }
            .into_any();
    }
    let columns = vec![
        "Task",
        "Status",
        "Target",
        "Version",
        "Attempt",
        "Replica",
        "Started",
        "Duration",
        "After / before",
        "Error / waiting for",
        "Actions",
    ];
    let span = columns.len();
    let groups = stage_groups(tasks, &stages)
        .into_iter()
        .map(|(stage, tasks)| {
            let data_stage = stage
                .as_ref()
                .map(|(_, s)| s.name.clone())
                .unwrap_or_default();
            let heading = (!stages.is_empty()).then(
                || view! { <StageHeading stage tasks=tasks.clone() stages=stages.len() span /> },
            );
            let rows = tasks
                .into_iter()
                .map(|task| {
                    let counts = cut.get(&task.id).copied().unwrap_or(TieCounts {
                        depends_on: task.depends_on.len(),
                        dependents: task.dependents.len(),
                    });
                    let ties = ties(&links, &task, counts);
                    let definition = definitions.remove(&task.id);
                    view! { <TaskRow task now action ties definition /> }
                })
                .collect_view();
            view! {
                <tbody class=TBODY data-stage=data_stage>
                    {heading}
                    {rows}
                </tbody>
            }
        })
        .collect_view();
    view! {
        <DataTable id="tasks" caption="Tasks of this plan" columns grouped=true>
            {groups}
        </DataTable>
    }
    .into_any()
}

/// A stage with its position in the plan (`None`: the tasks in no stage),
/// and its tasks on this page.
type StageGroup = (Option<(usize, StageView)>, Vec<TaskView>);

/// The shown tasks by stage, in the plan's stage order, then those in no
/// stage; stages with no task on this page are left out.
fn stage_groups(tasks: Vec<TaskView>, stages: &[StageView]) -> Vec<StageGroup> {
    let mut groups: Vec<StageGroup> = stages
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, s)| (Some((i, s)), Vec::new()))
        .chain([(None, Vec::new())])
        .collect();
    let loose = groups.len() - 1;
    for task in tasks {
        let at = task
            .stage
            .as_deref()
            .and_then(|s| stages.iter().position(|st| st.name == s))
            .unwrap_or(loose);
        groups[at].1.push(task);
    }
    groups.retain(|(_, tasks)| !tasks.is_empty());
    groups
}

/// A stage's heading row: its name and place, what approval it needs or
/// who gave it, and its tasks on this page by status.
#[component]
fn StageHeading(
    stage: Option<(usize, StageView)>,
    tasks: Vec<TaskView>,
    stages: usize,
    span: usize,
) -> impl IntoView {
    let mut counts: BTreeMap<TaskStatus, usize> = BTreeMap::new();
    for t in &tasks {
        *counts.entry(t.status).or_default() += 1;
    }
    let summary = TaskStatus::PROGRESS_ORDER
        .into_iter()
        .filter_map(|s| counts.get(&s).map(|n| format!("{n} {s}")))
        .collect::<Vec<_>>()
        .join(", ");
    let (title, approval) = match stage {
        Some((i, stage)) => {
            let approved = tasks.iter().find_map(|t| t.approved_by.clone());
            let approval = match (stage.approval.as_deref(), approved) {
                (None, _) => None,
                (Some(_), Some(by)) => Some(format!("approved by {by}")),
                (Some("two-person"), None) => Some(
                    "needs a two-person approval (not by the submitter); one approval releases the whole stage"
                        .to_owned(),
                ),
                (Some(_), None) => {
                    Some("needs an approval; one approval releases the whole stage".to_owned())
                }
            };
            (
                format!("Stage {} of {stages}: {}", i + 1, stage.name),
                approval,
            )
        }
        None => ("Not in a stage".to_owned(), None),
    };
    let approval = approval.map(|text| {
        view! {
            <span class="stage-approval rounded-sm bg-white px-1.5 py-0.5 text-xs font-medium text-slate-800 ring-1 ring-slate-300">
                {text}
            </span>
        }
    });
    view! {
        <tr class="stage-heading bg-slate-100">
            <th colspan=span scope="colgroup" class="px-3 py-2 text-left">
                <span class="flex flex-wrap items-center gap-x-3 gap-y-1">
                    <span class="font-semibold text-slate-900">{title}</span>
                    {approval}
                    <span class="text-xs font-normal text-slate-700">{summary}</span>
                </span>
            </th>
        </tr>
    }
}

/// The row's "after / before" cell: what the task runs after (it waits
/// for them) and before (they wait for it), linked to their rows.
fn ties(links: &Links, task: &TaskView, counts: TieCounts) -> AnyView {
    if counts.depends_on == 0 && counts.dependents == 0 {
        return view! { <span class="text-slate-500">"—"</span> }.into_any();
    }
    let after = (counts.depends_on > 0).then(|| {
        view! {
            <p class="depends-on">
                <span class="text-slate-600">"after "</span>
                {links.list(&task.depends_on, counts.depends_on)}
            </p>
        }
    });
    let before = (counts.dependents > 0).then(|| {
        view! {
            <p class="dependents">
                <span class="text-slate-600">"before "</span>
                {links.list(&task.dependents, counts.dependents)}
            </p>
        }
    });
    view! { <div class="space-y-0.5 text-xs">{after} {before}</div> }.into_any()
}

/// Who must approve the task, or who did.
fn approval_note(task: &TaskView, now: DateTime<Utc>) -> Option<AnyView> {
    if let Some(by) = &task.approved_by {
        let at = task.approved_at.map(|at| view! { " " <Ago at now /> });
        return Some(
            view! {
                <span class="approved-by mt-1 block text-xs text-slate-700">
                    {format!("approved by {by}")}
                    {at}
                </span>
            }
            .into_any(),
        );
    }
    let kind = task.approval.as_deref()?;
    let mut text = match kind {
        "two-person" => "needs a two-person approval".to_owned(),
        _ => "needs an approval".to_owned(),
    };
    if !task.approvers.is_empty() {
        text.push_str(&format!(" from {}", task.approvers.join(" or ")));
    }
    Some(
        view! { <span class="needs-approval mt-1 block text-xs font-medium text-amber-900">{text}</span> }
            .into_any(),
    )
}

#[component]
fn TaskRow(
    task: TaskView,
    now: DateTime<Utc>,
    action: ServerAction<Act>,
    ties: AnyView,
    definition: Option<TaskDefinition>,
) -> impl IntoView {
    let status = task.status;
    let subject = format!("task {}", task.name);
    let approval = approval_note(&task, now);
    let approve = (task.approval.is_some() && task.approved_by.is_none()).then(|| {
        view! {
            <ActionButton
                action
                kind=Action::TaskApprove
                id=task.id
                enabled=awaits_approval(&task)
                label="Approve"
                subject=subject.clone()
            />
        }
    });
    let name = match task.run_id {
        Some(run) => {
            view! { <a class=LINK href=format!("/runs/{run}")>{task.name.clone()}</a> }.into_any()
        }
        None => view! { <span>{task.name.clone()}</span> }.into_any(),
    };
    // A target is a link to every run on it, across plans.
    let target_link =
        view! { <a class=LINK href=runs_with("target", &task.target)>{task.target.clone()}</a> };
    let target = if task.exclusive {
        view! { <span>{target_link}</span> }.into_any()
    } else {
        view! {
            <span>
                {target_link}
                <span class="ml-1 text-xs text-slate-600" title="non-exclusive: shares the target">"shared"</span>
            </span>
        }
        .into_any()
    };
    let replica = match task.replica_id {
        Some(r) => view! { <a class=LINK href=runs_with("replica", &r)>{r.clone()}</a> }.into_any(),
        None => view! { <span>"—"</span> }.into_any(),
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
        <tr
            id=format!("task-{}", task.id)
            data-task-id=task.id
            data-task-name=task.name.clone()
            data-status=status.as_str()
            data-approved-by=task.approved_by.clone()
        >
            <td class=format!("{TD} font-medium")>
                {name}
                {definition.map(|definition| view! {
                    <details class="definition mt-1 font-normal">
                        <summary class="cursor-pointer text-xs text-slate-600">
                            {format!("what it runs: {}", definition.executor.kind())}
                        </summary>
                        <div class="mt-1 w-80 max-w-[80vw]"><Definition definition /></div>
                    </details>
                })}
            </td>
            <td class=TD>
                <TaskStatusBadge status />
                <Canceling
                    by=task.cancel_requested_by.clone().filter(|_| status == TaskStatus::Running)
                    at=task.cancel_requested_at
                />
                {approval}
            </td>
            <td class=TD>{target}{node}</td>
            <td class=format!("{TD} font-mono")>{task.version.unwrap_or_else(|| "—".into())}</td>
            <td class=format!("{TD} tabular-nums")>{task.attempt.map(|a| a.to_string()).unwrap_or_else(|| "—".into())}</td>
            <td class=format!("{TD} font-mono text-xs whitespace-nowrap")>{replica}</td>
            <td class=TD><MaybeAgo at=task.started_at now /></td>
            <td class=format!("{TD} whitespace-nowrap")>{took}</td>
            <td class=format!("{TD} max-w-60")>{ties}</td>
            <td class=format!("{TD} max-w-md")>{note}</td>
            <td class=TD>
                <div class="flex flex-wrap gap-1">
                    {approve}
                    <TaskButtons
                        action
                        task_id=task.id
                        subject
                        can_retry=matches!(status, TaskStatus::Failed | TaskStatus::Canceled)
                        can_cancel=status.is_active() && task.cancel_requested_by.is_none()
                        can_skip=matches!(status, TaskStatus::NotStarted | TaskStatus::Failed | TaskStatus::Canceled)
                    />
                </div>
            </td>
        </tr>
    }
}
