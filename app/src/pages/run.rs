//! `/runs/:id`: one attempt — its history (who moved it, when, why), its
//! heartbeat and deadlines, the end of its log (live), and how it ended.

use chrono::{DateTime, Utc};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;

use crate::components::actions::{Act, ActionButton, ActionResult, TaskButtons};
use crate::components::definition::Definition;
use crate::components::feed::Feed;
use crate::components::links::runs_with;
use crate::components::live::use_live;
use crate::components::loaded::loaded;
use crate::components::status::{Canceling, RunStatusBadge};
use crate::components::tables::LINK;
use crate::components::time::{Ago, MaybeAgo, duration, exact};
use crate::error::DashboardError;
use crate::pages::plan::path_id;
use domain::model::{EventView, RunStatus, RunView};
use domain::views::{Action, LogTail, RunPage};

#[server(prefix = "/_fn", endpoint = "run")]
pub async fn load_run(id: i64) -> Result<RunPage, DashboardError> {
    use crate::backend::LOG_TAIL_LINES;
    crate::backend::source()?.run(id, LOG_TAIL_LINES).await
}

#[component]
pub fn RunDetailPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || path_id(params.read().get("id"));
    let live = use_live(move || Feed::Run { id: id() });
    let action = ServerAction::<Act>::new();
    let data = Resource::new(
        move || (id(), live.track(), action.version().get()),
        move |(id, _, _)| live.or_fetch(load_run(id)),
    );
    view! {
        <section class="space-y-5">
            <ActionResult action />
            {loaded(data, move |r| view! { <RunBody r action /> }.into_any())}
        </section>
    }
}

#[component]
fn RunBody(r: RunPage, action: ServerAction<Act>) -> impl IntoView {
    let RunPage { now, run, log } = r;
    let title = format!("{} attempt {} · Baton", run.task_name, run.attempt);
    let events = run.events.clone();
    view! {
        <Title text=title />
        <header class="space-y-2">
            <nav aria-label="Breadcrumb" class="text-sm">
                <a class=LINK href="/plans">"Plans"</a>
                " / "
                <a class=LINK href=format!("/plans/{}", run.plan_id)>{format!("plan {}", run.plan_id)}</a>
                <span class="text-slate-500">{format!(" / run {}", run.id)}</span>
            </nav>
            <div class="flex flex-wrap items-center gap-3">
                <h1 class="text-2xl font-semibold tracking-tight break-all">
                    {format!("{} · attempt {}", run.task_name, run.attempt)}
                </h1>
                <span id="run-status">
                    <RunStatusBadge status=run.status />
                    <Canceling
                        by=run.cancel_requested_by.clone().filter(|_| run.status == RunStatus::Running)
                        at=run.cancel_requested_at
                    />
                </span>
            </div>
            <p class="text-sm text-slate-600">
                "Target "
                <a class=LINK href=runs_with("target", &run.target)>{run.target.clone()}</a>
            </p>
            <RunActions run=run.clone() action />
        </header>
        <div class="grid gap-4 lg:grid-cols-2">
            <RunFacts run=run.clone() now />
            <section class="space-y-2 rounded-sm border border-slate-200 bg-white p-4">
                <h2 class="text-sm font-semibold text-slate-700">"History"</h2>
                <Timeline events now />
            </section>
            {run.definition.clone().map(|definition| view! {
                <section id="run-definition" class="space-y-2 rounded-sm border border-slate-200 bg-white p-4">
                    <h2 class="text-sm font-semibold text-slate-700">"What the task runs"</h2>
                    <Definition definition />
                </section>
            })}
        </div>
        <RunLog run_id=run.id log />
    }
}

/// The task's buttons where the operator reads the failure: they act on
/// the run's task, so on an older attempt the server refuses what no
/// longer applies and says why.
#[component]
fn RunActions(run: RunView, action: ServerAction<Act>) -> impl IntoView {
    let status = run.status;
    let subject = format!("task {}", run.task_name);
    let ended_badly = matches!(status, RunStatus::Failed | RunStatus::Canceled);
    let awaits_approval =
        status == RunStatus::Pending && run.waiting_cause.as_deref() == Some("waits for approval");
    let id = run.task_id;
    view! {
        <div id="run-actions" class="flex flex-wrap gap-1">
            {awaits_approval.then(|| view! {
                <ActionButton action kind=Action::TaskApprove id enabled=true label="Approve" subject=subject.clone() />
            })}
            <TaskButtons
                action
                task_id=id
                subject
                can_retry=ended_badly
                can_cancel=!status.is_terminal() && run.cancel_requested_by.is_none()
                can_skip=ended_badly
            />
        </div>
    }
}

/// Heartbeat, deadlines and outcome as a description list.
#[component]
fn RunFacts(run: RunView, now: DateTime<Utc>) -> impl IntoView {
    let took = run
        .started_at
        .map(|s| duration(s, run.finished_at.unwrap_or(now)));
    let outcome = match (&run.error, run.result_code) {
        (Some(error), _) => view! { <span id="run-error" class="font-mono text-xs break-words text-red-800">{error.clone()}</span> }.into_any(),
        (None, Some(code)) => view! { <span>{format!("result {code}")}</span> }.into_any(),
        (None, None) if run.status.is_terminal() => view! { <span>"finished"</span> }.into_any(),
        _ => view! { <span class="text-slate-600">"not finished"</span> }.into_any(),
    };
    // A run's deadlines bind only while it runs: the row keeps the last
    // ones set, and a finished run "in 59 min" from a deadline misleads.
    let running = run.status == RunStatus::Running;
    let heartbeat_deadline = run.heartbeat_deadline.filter(|_| running);
    let deadline = run.deadline.filter(|_| running);
    let waiting = run.waiting_cause.clone().map(|cause| {
        view! {
            <dt class="text-slate-600">"Waiting for"</dt>
            <dd class="waiting-cause font-medium text-amber-900">{cause}</dd>
        }
    });
    view! {
        <section class="space-y-2 rounded-sm border border-slate-200 bg-white p-4">
            <h2 class="text-sm font-semibold text-slate-700">"Run"</h2>
            <dl class="grid grid-cols-[max-content_1fr] gap-x-4 gap-y-1 text-sm">
                {waiting}
                <dt class="text-slate-600">"Replica"</dt>
                <dd class="font-mono text-xs">
                    {match run.replica_id.clone() {
                        Some(r) => view! { <a class=LINK href=runs_with("replica", &r)>{r.clone()}</a> }.into_any(),
                        None => view! { <span>"—"</span> }.into_any(),
                    }}
                </dd>
                <dt class="text-slate-600">"Created"</dt>
                <dd><Ago at=run.created_at now /></dd>
                <dt class="text-slate-600">"Not before"</dt>
                <dd><MaybeAgo at=run.run_at now /></dd>
                <dt class="text-slate-600">"Started"</dt>
                <dd><MaybeAgo at=run.started_at now /></dd>
                <dt class="text-slate-600">"Last heartbeat"</dt>
                <dd id="run-heartbeat"><MaybeAgo at=run.last_heartbeat_at now /></dd>
                <dt class="text-slate-600">"Heartbeat deadline"</dt>
                <dd id="run-heartbeat-deadline"><MaybeAgo at=heartbeat_deadline now /></dd>
                <dt class="text-slate-600">"Hard deadline"</dt>
                <dd id="run-deadline"><MaybeAgo at=deadline now /></dd>
                <dt class="text-slate-600">"Finished"</dt>
                <dd><MaybeAgo at=run.finished_at now /></dd>
                <dt class="text-slate-600">"Duration"</dt>
                <dd>{took.unwrap_or_else(|| "—".into())}</dd>
                <dt class="text-slate-600">"Result"</dt>
                <dd>{outcome}</dd>
            </dl>
        </section>
    }
}

#[component]
fn Timeline(events: Vec<EventView>, now: DateTime<Utc>) -> impl IntoView {
    let items = events
        .into_iter()
        .map(|e| {
            let from = e.from.map(|f| view! { <RunStatusBadge status=f /> " → " });
            let by = match &e.replica_id {
                Some(replica) if *replica != e.actor => format!("by {} on {replica}", e.actor),
                _ => format!("by {}", e.actor),
            };
            view! {
                <li class="relative border-l-2 border-slate-200 pb-3 pl-4 last:pb-0" data-to=e.to.as_str()>
                    <span class="absolute top-1.5 -left-1.5 h-2.5 w-2.5 rounded-full bg-slate-400"></span>
                    <div class="flex flex-wrap items-center gap-1 text-sm">
                        {from}
                        <RunStatusBadge status=e.to />
                        <span class="text-slate-600">{by}</span>
                        <span class="ml-auto text-xs text-slate-600" title=exact(e.at)><Ago at=e.at now /></span>
                    </div>
                    {e.detail.map(|d| view! { <p class="mt-0.5 text-sm text-slate-800">{d}</p> })}
                </li>
            }
        })
        .collect_view();
    view! { <ol id="timeline" class="ml-1.5">{items}</ol> }
}

#[component]
fn RunLog(run_id: i64, log: LogTail) -> impl IntoView {
    let shown = log.lines.len() as i64;
    let note = if log.total > shown {
        format!("The last {shown} of {} lines.", log.total)
    } else {
        format!("{} lines.", log.total)
    };
    let body = if log.lines.is_empty() {
        view! { <p class="px-3 py-2 text-sm text-slate-300">"No output yet."</p> }.into_any()
    } else {
        let lines = log
            .lines
            .into_iter()
            .map(|l| {
                let class = if l.stream == "stderr" {
                    "text-red-300"
                } else {
                    "text-slate-100"
                };
                view! { <span class=format!("block {class}") title=exact(l.at)>{l.line}</span> }
            })
            .collect_view();
        // A column laid out from its end opens scrolled to the newest line,
        // with no script: the end of a log is where the reason is. Live
        // updates rebuild the lines in place, so the browser keeps the
        // view at the newest line, or where the operator scrolled up to
        // (workflow.spec.ts checks both).
        view! {
            <div id="run-log" class="flex max-h-96 flex-col-reverse overflow-auto">
                <pre class="px-3 py-2 text-xs leading-5">{lines}</pre>
            </div>
        }
        .into_any()
    };
    view! {
        <section class="space-y-2">
            <div class="flex flex-wrap items-baseline justify-between gap-2">
                <h2 class="text-lg font-semibold">"Log"</h2>
                <p class="text-sm text-slate-600">
                    {note} " "
                    <a class=LINK href=format!("/api/v1/runs/{run_id}/log")>"Full log as text"</a>
                </p>
            </div>
            <div class="rounded-sm bg-slate-900">{body}</div>
        </section>
    }
}
