//! `/runs`: every run across plans, newest first, filtered by status,
//! target, plan, replica, actor, error text and finish time. The filter
//! is the page's query string, so a search is a link to share, and the
//! form works without JavaScript; older pages follow the `before` cursor.

use leptos::prelude::*;
use leptos_router::components::Form;
use leptos_router::hooks::use_query_map;

use crate::components::actions::{BUTTON, outcome};
use crate::components::bulk::{
    MAX_BULK_RUNS, bulk_bar, bulk_confirm, consequence, result_line, runs_word,
};
use crate::components::feed::Feed;
use crate::components::links::{runs_href, runs_with};
use crate::components::live::use_live;
use crate::components::loaded::loaded;
use crate::components::notice::EmptyState;
use crate::components::status::{Canceling, RunStatusBadge};
use crate::components::tables::{DataTable, LINK, TD};
use crate::components::time::MaybeAgo;
use crate::error::DashboardError;
use domain::model::RunStatus;
use domain::search::{BulkAction, RunQuery, RunSummary};
use domain::views::RunsPage;

pub const PAGE_SIZE: i64 = 50;

/// One page of the runs matching the filter, below run `before`.
#[server(prefix = "/_fn", endpoint = "runs")]
#[allow(clippy::too_many_arguments)]
pub async fn load_runs(
    status: Option<String>,
    target: Option<String>,
    plan: Option<String>,
    replica: Option<String>,
    actor: Option<String>,
    error: Option<String>,
    since: Option<String>,
    until: Option<String>,
    before: Option<i64>,
    confirm: Option<BulkAction>,
) -> Result<RunsPage, DashboardError> {
    let query = RunQuery {
        status,
        target,
        plan,
        replica,
        actor,
        error,
        since,
        until,
    };
    crate::backend::source()?
        .runs(query, before.filter(|b| *b > 0), PAGE_SIZE, confirm)
        .await
}

/// Applies `action` to the runs the filter matches, if they are still
/// `expected`; answers with the result line (a plain form post is sent
/// back to the list with it instead, `bulk::back_to_list`).
#[server(prefix = "/_fn", endpoint = "runs_bulk")]
#[allow(clippy::too_many_arguments)]
pub async fn bulk_act(
    action: BulkAction,
    status: Option<String>,
    target: Option<String>,
    plan: Option<String>,
    replica: Option<String>,
    actor: Option<String>,
    error: Option<String>,
    since: Option<String>,
    until: Option<String>,
    expected: i64,
) -> Result<String, DashboardError> {
    let who = crate::backend::identity()?;
    let query = RunQuery {
        status,
        target,
        plan,
        replica,
        actor,
        error,
        since,
        until,
    };
    let fallback = query.to_query_string(&[]);
    let done = crate::backend::source()?
        .bulk(&who, action, query, expected)
        .await?;
    crate::components::bulk::back_to_list("/runs", &fallback, &done);
    Ok(crate::components::bulk::done_line(&done))
}

#[component]
pub fn RunsListPage() -> impl IntoView {
    let query_map = use_query_map();
    let field = move |name: &str| query_map.read().get(name).unwrap_or_default();
    let query = move || RunQuery {
        status: Some(field("status")),
        target: Some(field("target")),
        plan: Some(field("plan")),
        replica: Some(field("replica")),
        actor: Some(field("actor")),
        error: Some(field("error")),
        since: Some(field("since")),
        until: Some(field("until")),
    };
    let before = move || field("before").parse::<i64>().ok();
    let confirm = move || BulkAction::parse(&field("confirm"));
    let live = use_live(move || Feed::runs(query(), before(), confirm()));
    let bulk = ServerAction::<BulkAct>::new();
    let data = Resource::new(
        move || {
            (
                query(),
                before(),
                confirm(),
                live.track(),
                bulk.version().get(),
            )
        },
        move |(q, before, confirm, _, _)| {
            live.or_fetch(load_runs(
                q.status, q.target, q.plan, q.replica, q.actor, q.error, q.since, q.until, before,
                confirm,
            ))
        },
    );
    let text_input = move |name: &'static str, label: &'static str, hint: &'static str| {
        view! {
            <label class="flex flex-col gap-1 text-sm text-slate-700">
                {label}
                <input
                    id=format!("runs-{name}")
                    type="search"
                    name=name
                    data-search={(name == "target").then_some("")}
                    autofocus={name == "target" && field("focus") == "search"}
                    placeholder=hint
                    prop:value=move || field(name)
                    class="w-40 rounded-sm border border-slate-400 bg-white px-2 py-1 text-sm"
                />
            </label>
        }
    };

    view! {
        <section class="space-y-4">
            <h1 class="text-2xl font-semibold tracking-tight">"Runs"</h1>
            <Form method="GET" action="/runs" attr:class="flex flex-wrap items-end gap-3" attr:id="run-filter">
                <label class="flex flex-col gap-1 text-sm text-slate-700">
                    "Status"
                    <select
                        id="runs-status"
                        name="status"
                        class="rounded-sm border border-slate-400 bg-white px-2 py-1 text-sm"
                    >
                        <option value="" selected=move || field("status").is_empty()>"Any"</option>
                        {RunStatus::ALL
                            .into_iter()
                            .map(|s| {
                                view! {
                                    <option
                                        value=s.as_str()
                                        selected=move || field("status").eq_ignore_ascii_case(s.as_str())
                                    >
                                        {s.as_str()}
                                    </option>
                                }
                            })
                            .collect_view()}
                    </select>
                </label>
                {text_input("target", "Target starts with", "db/")}
                {text_input("plan", "Plan name contains", "release")}
                {text_input("replica", "Replica", "replica id")}
                {text_input("actor", "Actor", "who acted")}
                {text_input("error", "Error contains", "deadlock")}
                {text_input("since", "Finished since", "1h, 2026-11-25T10:00")}
                {text_input("until", "Finished before", "30m")}
                <button
                    type="submit"
                    class="rounded-sm border border-slate-400 bg-white px-3 py-1 text-sm font-medium hover:bg-slate-100 focus-visible:outline-2 focus-visible:outline-offset-2 focus-visible:outline-blue-600"
                >
                    "Search"
                </button>
                <a class=format!("{LINK} py-1 text-sm") href="/runs">"Clear"</a>
            </Form>
            <div id="bulk-result" role="status" aria-live="polite">
                {move || result_line(bulk.value().get(), &query_map.read()).map(outcome)}
            </div>
            {loaded(
                data,
                move |p| {
                    let bar = query()
                        .is_filtered()
                        .then(|| view! { <BulkBar bulk p=p.clone() query=query() /> });
                    view! {
                        {bar}
                        <RunTable p query=query() before=before() />
                    }
                        .into_any()
                },
            )}
        </section>
    }
}

/// Retry, Cancel and Skip for every run the search matches that each
/// applies to ([`bulk_bar`]); the confirming form carries the filter as
/// the server read it and the count.
#[component]
fn BulkBar(bulk: ServerAction<BulkAct>, p: RunsPage, query: RunQuery) -> impl IntoView {
    let href = |action: BulkAction| {
        format!(
            "/runs?{}",
            query.to_query_string(&[("confirm", action.as_str().to_owned())])
        )
    };
    let panel = p.confirm.map(|(action, n)| {
        view! { <BulkConfirm bulk action n resolved=p.resolved.clone() back=runs_href(&query) /> }
            .into_any()
    });
    // Not "Cancel all…" over FAILED runs: it could change none of them.
    bulk_bar(
        "Every run this search matches:",
        href,
        |action| query.may_change(action),
        panel,
    )
}

/// The question before a bulk action, with the count it is bound to.
#[component]
fn BulkConfirm(
    bulk: ServerAction<BulkAct>,
    action: BulkAction,
    n: i64,
    resolved: RunQuery,
    back: String,
) -> impl IntoView {
    let runs = runs_word(n);
    let body = if n == 0 {
        view! { <p>{format!("No run this search matches can be {}.", action.past())}</p> }
            .into_any()
    } else if n > MAX_BULK_RUNS {
        view! {
            <p>{format!("More than {MAX_BULK_RUNS} runs match; narrow the search to {} them.", action.as_str())}</p>
        }
        .into_any()
    } else {
        let hidden = resolved
            .pairs()
            .into_iter()
            .map(|(field, value)| view! { <input type="hidden" name=field value=value.to_owned() /> })
            .collect_view();
        let question = format!(
            "{} the {n} {runs} this search matches? {}",
            action.label(),
            consequence(action)
        );
        view! {
            <p>{question}</p>
            <ActionForm action=bulk attr:class="inline">
                <input type="hidden" name="action" value=action.as_str() />
                {hidden}
                <input type="hidden" name="expected" value=n />
                <button type="submit" class=format!("{BUTTON} btn-danger") data-bulk-confirm=action.as_str()>
                    {format!("Yes, {} {n} {runs}", action.as_str())}
                </button>
            </ActionForm>
        }
        .into_any()
    };
    bulk_confirm(body, back)
}

#[component]
fn RunTable(p: RunsPage, query: RunQuery, before: Option<i64>) -> impl IntoView {
    let RunsPage { now, list, .. } = p;
    if list.runs.is_empty() {
        let message = if before.is_some() {
            "No older run matches."
        } else if query.is_filtered() {
            "No run matches these filters. Widen or clear them to see more."
        } else {
            "No runs yet. Submit a plan and its runs appear here."
        };
        return view! { <EmptyState id="runs-empty">{message}</EmptyState> }.into_any();
    }
    let newest = before.map(|_| {
        view! { <a class=LINK rel="first" href=runs_href(&query)>"← Newest"</a> }
    });
    let older = list.next_before.map(|next| {
        let href = format!(
            "/runs?{}",
            query.to_query_string(&[("before", next.to_string())])
        );
        view! { <a class=LINK rel="next" href=href>"Older →"</a> }
    });
    let shown = list.runs.len();
    view! {
        <DataTable
            id="runs"
            caption="Runs, newest first"
            columns=vec!["Run", "Plan", "Task", "Target", "Status", "Replica", "Finished", "Error"]
        >
            {list.runs.into_iter().map(|run| view! { <RunRow run now /> }).collect_view()}
        </DataTable>
        <nav aria-label="Pages" class="flex items-center justify-between gap-3 text-sm text-slate-700">
            <span>{newest}</span>
            <span id="runs-shown">
                {format!("{shown} {} shown", if shown == 1 { "run" } else { "runs" })}
            </span>
            <span>{older}</span>
        </nav>
    }
    .into_any()
}

#[component]
fn RunRow(run: RunSummary, now: chrono::DateTime<chrono::Utc>) -> impl IntoView {
    let replica = run.replica_id.clone().map(|r| {
        view! { <a class=LINK href=runs_with("replica", &r)>{r.clone()}</a> }
    });
    let error = run.error.clone().unwrap_or_default();
    view! {
        <tr class="hover:bg-slate-50" data-run-id=run.id>
            <td class=format!("{TD} font-mono tabular-nums")>
                <a class=LINK href=format!("/runs/{}", run.id)>{format!("#{}", run.id)}</a>
            </td>
            <td class=TD>
                <a class=LINK href=format!("/plans/{}", run.plan_id)>{run.plan_name}</a>
            </td>
            <td class=TD>{format!("{} #{}", run.task_name, run.attempt)}</td>
            <td class=format!("{TD} font-mono")>
                <a class=LINK href=runs_with("target", &run.target)>{run.target.clone()}</a>
            </td>
            <td class=TD>
                <RunStatusBadge status=run.status />
                <Canceling by=run.cancel_requested_by.clone().filter(|_| run.status == RunStatus::Running) at=None />
            </td>
            <td class=format!("{TD} font-mono whitespace-nowrap")>{replica}</td>
            <td class=TD><MaybeAgo at=run.finished_at now /></td>
            <td class=format!("{TD} max-w-xs truncate text-slate-700") title=error.clone()>{error.clone()}</td>
        </tr>
    }
}
