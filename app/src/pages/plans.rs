//! `/plans`: every plan, newest first, with a progress bar each; filter by
//! status, search by name, page through; and on a filtered list, Retry,
//! Cancel or Skip all on the runs of every plan it matches. Filters, pages
//! and the bulk confirmation are plain query parameters, so links can be
//! shared and everything works without JavaScript.

use leptos::prelude::*;
use leptos_router::components::Form;
use leptos_router::hooks::use_query_map;

use crate::components::actions::{BUTTON, outcome};
use crate::components::bulk::{
    MAX_BULK_RUNS, bulk_bar, bulk_confirm, consequence, result_line, runs_word,
};
use crate::components::feed::Feed;
use crate::components::live::use_live;
use crate::components::loaded::loaded;
use crate::components::notice::EmptyState;
use crate::components::status::{PlanStatusBadge, ProgressBar};
use crate::components::tables::{DataTable, LINK, TD};
use crate::components::time::Ago;
use crate::error::DashboardError;
use domain::model::{PlanStatus, PlanSummary};
use domain::search::{BulkAction, PlanBulkCount, PlanQuery};
use domain::views::PlansPage;

pub const PAGE_SIZE: i64 = 50;
/// The last page number whose offset still fits in an `i64`: a page
/// number is clamped to it rather than overflowing (`?page=9223372036854775807`).
const MAX_PAGE: i64 = i64::MAX / PAGE_SIZE;

/// Page `page` (from 1) of the plans whose status is spelled `status` and
/// whose name contains `q`; with `confirm`, what that bulk action would
/// change in them.
#[server(prefix = "/_fn", endpoint = "plans")]
pub async fn load_plans(
    status: Option<String>,
    q: Option<String>,
    page: i64,
    confirm: Option<BulkAction>,
) -> Result<PlansPage, DashboardError> {
    // Read as the API reads it: a NUL in the name reached PostgreSQL once
    // and came back a 500.
    let filter = domain::filter::plan::parse(&domain::search::PlanQuery { status, name: q })?;
    let offset = (page.clamp(1, MAX_PAGE) - 1) * PAGE_SIZE;
    crate::backend::source()?
        .plans(filter, PAGE_SIZE, offset, confirm)
        .await
}

/// Applies `action` to the runs of the plans `status` and `name` match,
/// if they are still `expected`; answers with the result line (a plain
/// form post is sent back to the list with it instead, `bulk::back_to_list`).
#[server(prefix = "/_fn", endpoint = "plans_bulk")]
pub async fn plans_bulk_act(
    action: BulkAction,
    status: Option<String>,
    name: Option<String>,
    expected: i64,
) -> Result<String, DashboardError> {
    let who = crate::backend::identity()?;
    // The list calls the name filter `q`.
    let fallback = domain::query::query_string(
        domain::query::filled(&[("status", &status), ("q", &name)]),
        &[],
    );
    let done = crate::backend::source()?
        .plans_bulk(&who, action, PlanQuery { status, name }, expected)
        .await?;
    crate::components::bulk::back_to_list("/plans", &fallback, &done);
    Ok(crate::components::bulk::done_line(&done))
}

/// The list's query string for `page`, keeping the filters.
fn page_href(status: &str, q: &str, page: i64) -> String {
    list_href(status, q, &[format!("page={page}")])
}

/// The list with its filters and `extra` parameters.
fn list_href(status: &str, q: &str, extra: &[String]) -> String {
    let mut params = extra.to_vec();
    if !status.is_empty() {
        params.push(format!("status={}", domain::query::encode_value(status)));
    }
    if !q.is_empty() {
        params.push(format!("q={}", domain::query::encode_value(q)));
    }
    match params.is_empty() {
        true => "/plans".to_owned(),
        false => format!("/plans?{}", params.join("&")),
    }
}

#[component]
pub fn PlansListPage() -> impl IntoView {
    let query = use_query_map();
    let status = move || query.read().get("status").unwrap_or_default();
    let q = move || query.read().get("q").unwrap_or_default();
    let page = move || {
        query
            .read()
            .get("page")
            .and_then(|p| p.parse::<i64>().ok())
            .unwrap_or(1)
            .clamp(1, MAX_PAGE)
    };
    let confirm = move || BulkAction::parse(&query.read().get("confirm").unwrap_or_default());
    let live = use_live(move || Feed::plans(&status(), &q(), page(), confirm()));
    let bulk = ServerAction::<PlansBulkAct>::new();
    let data = Resource::new(
        move || {
            (
                status(),
                q(),
                page(),
                confirm(),
                live.track(),
                bulk.version().get(),
            )
        },
        move |(status, q, page, confirm, _, _)| {
            live.or_fetch(load_plans(Some(status), Some(q), page, confirm))
        },
    );

    view! {
        <section class="space-y-4">
            <div class="flex flex-wrap items-end justify-between gap-3">
                <h1 class="text-2xl font-semibold tracking-tight">"Plans"</h1>
                {crate::components::session::may_act().then(|| view! {
                    <a
                        href="/plans/new"
                        class="rounded-sm bg-blue-700 px-3 py-1.5 text-sm font-medium text-white hover:bg-blue-800 focus-visible:outline-2 focus-visible:outline-offset-2 focus-visible:outline-blue-600"
                    >
                        "Submit a plan"
                    </a>
                })}
            </div>
            <Form method="GET" action="/plans" attr:class="flex flex-wrap items-end gap-3" attr:id="plan-filter">
                <label class="flex flex-col gap-1 text-sm text-slate-700">
                    "Name contains"
                    <input
                        id="plan-search"
                        data-search
                        type="search"
                        name="q"
                        prop:value=q
                        class="rounded-sm border border-slate-400 bg-white px-2 py-1 text-sm"
                    />
                </label>
                <label class="flex flex-col gap-1 text-sm text-slate-700">
                    "Status"
                    <select
                        id="plan-status-filter"
                        name="status"
                        class="rounded-sm border border-slate-400 bg-white px-2 py-1 text-sm"
                    >
                        <option value="" selected=move || status().is_empty()>"All"</option>
                        {PlanStatus::ALL
                            .into_iter()
                            .map(|s| {
                                view! {
                                    <option value=s.as_str() selected=move || status() == s.as_str()>
                                        {s.as_str()}
                                    </option>
                                }
                            })
                            .collect_view()}
                    </select>
                </label>
                <button
                    type="submit"
                    class="rounded-sm border border-slate-400 bg-white px-3 py-1 text-sm font-medium hover:bg-slate-100 focus-visible:outline-2 focus-visible:outline-offset-2 focus-visible:outline-blue-600"
                >
                    "Apply"
                </button>
            </Form>
            <div id="bulk-result" role="status" aria-live="polite">
                {move || result_line(bulk.value().get(), &query.read()).map(outcome)}
            </div>
            {loaded(
                data,
                move |p| {
                    let filtered = !status().is_empty() || !q().is_empty();
                    let bar = filtered
                        .then(|| view! { <PlansBulkBar bulk p=p.clone() status=status() q=q() /> });
                    view! {
                        {bar}
                        <PlanTable p filtered status=status() q=q() page=page() />
                    }
                        .into_any()
                },
            )}
        </section>
    }
}

/// Retry, Cancel and Skip all on the runs of every plan the filter
/// matches ([`bulk_bar`]), across every page of the list.
#[component]
fn PlansBulkBar(
    bulk: ServerAction<PlansBulkAct>,
    p: PlansPage,
    status: String,
    q: String,
) -> impl IntoView {
    let href =
        |action: BulkAction| list_href(&status, &q, &[format!("confirm={}", action.as_str())]);
    let filter = PlanQuery {
        status: Some(status.clone()),
        name: Some(q.clone()),
    };
    let panel = p.confirm.map(|(action, count)| {
        view! { <PlansBulkConfirm bulk action count filter back=list_href(&status, &q, &[]) /> }
            .into_any()
    });
    // Every action, whatever the status filter: a FAILED plan may be
    // HALTED with PENDING tasks to cancel.
    bulk_bar(
        "The runs of every plan this list matches:",
        href,
        |_| true,
        panel,
    )
}

/// The question before a bulk action on plans: how many runs, in how many
/// plans; the action is bound to the number of runs.
#[component]
fn PlansBulkConfirm(
    bulk: ServerAction<PlansBulkAct>,
    action: BulkAction,
    count: PlanBulkCount,
    filter: PlanQuery,
    back: String,
) -> impl IntoView {
    let PlanBulkCount { runs: n, plans } = count;
    let runs = runs_word(n);
    let which = match action {
        BulkAction::Retry | BulkAction::Skip => "failed or canceled",
        BulkAction::Cancel => "live",
    };
    let body = if n == 0 {
        view! {
            <p>{format!("No run of the plans this list matches can be {}.", action.past())}</p>
        }
        .into_any()
    } else if n > MAX_BULK_RUNS {
        view! {
            <p>{format!("More than {MAX_BULK_RUNS} runs match; narrow the list to {} them.", action.as_str())}</p>
        }
        .into_any()
    } else {
        let hidden = filter
            .pairs()
            .into_iter()
            .map(|(field, value)| view! { <input type="hidden" name=field value=value.to_owned() /> })
            .collect_view();
        let question = format!(
            "{} the {n} {which} {runs} in {plans} {} this list matches? {}",
            action.label(),
            if plans == 1 { "plan" } else { "plans" },
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
fn PlanTable(p: PlansPage, filtered: bool, status: String, q: String, page: i64) -> impl IntoView {
    let PlansPage { now, list, .. } = p;
    if list.plans.is_empty() {
        let message = if filtered {
            "No plan matches these filters. Clear them to see every plan."
        } else if page > 1 {
            "There are no plans on this page."
        } else {
            "No plans yet. Submit one with the button above, or POST a plan file to /api/v1/plans."
        };
        return view! { <EmptyState id="plans-empty">{message}</EmptyState> }.into_any();
    }
    let first = (page - 1) * PAGE_SIZE + 1;
    let last = first + list.plans.len() as i64 - 1;
    let newer = (page > 1).then(|| {
        view! { <a class=LINK rel="prev" href=page_href(&status, &q, page - 1)>"← Newer"</a> }
    });
    let older = (last < list.total).then(|| {
        view! { <a class=LINK rel="next" href=page_href(&status, &q, page + 1)>"Older →"</a> }
    });
    view! {
        <DataTable
            id="plans"
            caption="Plans, newest first"
            columns=vec!["ID", "Name", "Status", "Progress", "Tasks", "Created"]
        >
            {list.plans.into_iter().map(|plan| view! { <PlanRow plan now /> }).collect_view()}
        </DataTable>
        <nav aria-label="Pages" class="flex items-center justify-between gap-3 text-sm text-slate-700">
            <span>{newer}</span>
            <span id="plans-range">{format!("Plans {first}–{last} of {}", list.total)}</span>
            <span>{older}</span>
        </nav>
    }
    .into_any()
}

#[component]
fn PlanRow(plan: PlanSummary, now: chrono::DateTime<chrono::Utc>) -> impl IntoView {
    let tasks: i64 = plan.counts.values().sum();
    view! {
        <tr class="hover:bg-slate-50" data-plan-id=plan.id>
            <td class=format!("{TD} font-mono tabular-nums text-slate-600")>{plan.id}</td>
            <td class=format!("{TD} font-medium")>
                <a class=LINK href=format!("/plans/{}", plan.id)>{plan.name}</a>
            </td>
            <td class=TD><PlanStatusBadge status=plan.status /></td>
            <td class=TD><ProgressBar counts=plan.counts /></td>
            <td class=format!("{TD} tabular-nums")>{tasks}</td>
            <td class=TD><Ago at=plan.created_at now /></td>
        </tr>
    }
}
