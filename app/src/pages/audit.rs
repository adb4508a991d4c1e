//! `/audit`: who changed what, when and from where, newest first:
//! operator actions (done or refused), sign-ins and failed sign-ins. The
//! filter is the page's query string, so a search is a link to share and
//! the form works without JavaScript; older pages follow the `before`
//! cursor, as on the Runs page.

use leptos::prelude::*;
use leptos_router::components::Form;
use leptos_router::hooks::use_query_map;

use crate::components::feed::Feed;
use crate::components::links::runs_with;
use crate::components::live::use_live;
use crate::components::loaded::loaded;
use crate::components::notice::EmptyState;
use crate::components::tables::{DataTable, LINK, TD};
use crate::components::time::Ago;
use crate::error::DashboardError;
use domain::audit::{AuditEntry, AuditQuery, Outcome};
use domain::views::AuditPage;

pub const PAGE_SIZE: i64 = 50;

/// One page of the entries matching the filter, below entry `before`.
#[server(prefix = "/_fn", endpoint = "audit")]
pub async fn load_audit(
    actor: Option<String>,
    action: Option<String>,
    subject: Option<String>,
    since: Option<String>,
    until: Option<String>,
    before: Option<i64>,
) -> Result<AuditPage, DashboardError> {
    let query = AuditQuery {
        actor,
        action,
        subject,
        since,
        until,
    };
    crate::backend::source()?
        .audit(query, before.filter(|b| *b > 0), PAGE_SIZE)
        .await
}

/// A link to the entries matching `query`, from the newest.
fn audit_href(query: &AuditQuery) -> String {
    match query.to_query_string(&[]) {
        q if q.is_empty() => "/audit".to_owned(),
        q => format!("/audit?{q}"),
    }
}

/// A link to the entries with one field set.
fn audit_with(field: &str, value: &str) -> String {
    format!("/audit?{field}={}", domain::query::encode_value(value))
}

#[component]
pub fn AuditListPage() -> impl IntoView {
    let query_map = use_query_map();
    let field = move |name: &str| query_map.read().get(name).unwrap_or_default();
    let query = move || AuditQuery {
        actor: Some(field("actor")),
        action: Some(field("action")),
        subject: Some(field("subject")),
        since: Some(field("since")),
        until: Some(field("until")),
    };
    let before = move || field("before").parse::<i64>().ok();
    let live = use_live(move || Feed::audit(query(), before()));
    let data = Resource::new(
        move || (query(), before(), live.track()),
        move |(q, before, _)| {
            live.or_fetch(load_audit(
                q.actor, q.action, q.subject, q.since, q.until, before,
            ))
        },
    );
    let text_input = move |name: &'static str, label: &'static str, hint: &'static str| {
        view! {
            <label class="flex flex-col gap-1 text-sm text-slate-700">
                {label}
                <input
                    id=format!("audit-{name}")
                    type="search"
                    name=name
                    data-search={(name == "subject").then_some("")}
                    placeholder=hint
                    prop:value=move || field(name)
                    class="w-44 rounded-sm border border-slate-400 bg-white px-2 py-1 text-sm"
                />
            </label>
        }
    };

    view! {
        <section class="space-y-4">
            <h1 class="text-2xl font-semibold tracking-tight">"Audit"</h1>
            <p class="text-sm text-slate-700">
                "Every change people asked for, done or refused, and every sign-in, with where it came from. The scheduler's own moves are in each run's history."
            </p>
            <Form method="GET" action="/audit" attr:class="flex flex-wrap items-end gap-3" attr:id="audit-filter">
                {text_input("subject", "Subject contains", "release-42, db/orders")}
                {text_input("actor", "Actor", "who acted")}
                {text_input("action", "Action starts with", "task., runs.bulk_retry")}
                {text_input("since", "Since", "1h, 2026-11-25T10:00")}
                {text_input("until", "Before", "30m")}
                <button
                    type="submit"
                    class="rounded-sm border border-slate-400 bg-white px-3 py-1 text-sm font-medium hover:bg-slate-100 focus-visible:outline-2 focus-visible:outline-offset-2 focus-visible:outline-blue-600"
                >
                    "Search"
                </button>
                <a class=format!("{LINK} py-1 text-sm") href="/audit">"Clear"</a>
            </Form>
            {loaded(
                data,
                move |p| view! { <AuditTable p query=query() before=before() /> }.into_any(),
            )}
        </section>
    }
}

#[component]
fn AuditTable(p: AuditPage, query: AuditQuery, before: Option<i64>) -> impl IntoView {
    let AuditPage { now, list } = p;
    if list.entries.is_empty() {
        let message = if before.is_some() {
            "No older entry matches."
        } else if query.is_filtered() {
            "No entry matches these filters. Widen or clear them to see more."
        } else {
            "Nothing recorded yet: actions and sign-ins appear here."
        };
        return view! { <EmptyState id="audit-empty">{message}</EmptyState> }.into_any();
    }
    let newest = before.map(|_| {
        view! { <a class=LINK rel="first" href=audit_href(&query)>"← Newest"</a> }
    });
    let older = list.next_before.map(|next| {
        let href = format!(
            "/audit?{}",
            query.to_query_string(&[("before", next.to_string())])
        );
        view! { <a class=LINK rel="next" href=href>"Older →"</a> }
    });
    let shown = list.entries.len();
    view! {
        <DataTable
            id="audit"
            caption="Audit log, newest first"
            columns=vec!["When", "Who", "From", "Action", "Subject", "Detail"]
        >
            {list.entries.into_iter().map(|entry| view! { <AuditRow entry now /> }).collect_view()}
        </DataTable>
        <nav aria-label="Pages" class="flex items-center justify-between gap-3 text-sm text-slate-700">
            <span>{newest}</span>
            <span id="audit-shown">
                {format!("{shown} {} shown", if shown == 1 { "entry" } else { "entries" })}
            </span>
            <span>{older}</span>
        </nav>
    }
    .into_any()
}

/// Where an entry's subject leads: its task (on its plan's page), plan,
/// schedule, or the target's runs.
fn subject_href(entry: &AuditEntry) -> Option<String> {
    match (
        entry.plan_id,
        entry.task_id,
        entry.schedule_id,
        &entry.target,
    ) {
        (Some(plan), Some(task), _, _) => Some(format!("/plans/{plan}#task-{task}")),
        (Some(plan), None, _, _) => Some(format!("/plans/{plan}")),
        (None, _, Some(schedule), _) => Some(format!("/schedules/{schedule}")),
        (None, _, None, Some(target)) => Some(runs_with("target", target)),
        _ => None,
    }
}

#[component]
fn AuditRow(entry: AuditEntry, now: chrono::DateTime<chrono::Utc>) -> impl IntoView {
    let subject = match subject_href(&entry) {
        Some(href) => view! { <a class=LINK href=href>{entry.subject.clone()}</a> }.into_any(),
        None => view! { <span>{entry.subject.clone()}</span> }.into_any(),
    };
    let refused = (entry.outcome == Outcome::Refused).then(|| {
        view! {
            <span class="ml-1 rounded-sm bg-red-100 px-1 text-xs font-medium text-red-900">"refused"</span>
        }
    });
    let from = entry.address.clone().unwrap_or_else(|| "—".to_owned());
    let forwarded = entry.forwarded_for.clone().map(|f| {
        view! {
            <span class="block text-xs text-slate-600" title="X-Forwarded-For as the client sent it; not checked">
                {format!("says {f}")}
            </span>
        }
    });
    view! {
        <tr class="hover:bg-slate-50" data-audit-id=entry.id data-action=entry.action.clone()>
            <td class=TD><Ago at=entry.at now /></td>
            <td class=TD>
                <a class=LINK href=audit_with("actor", &entry.actor)>{entry.actor.clone()}</a>
            </td>
            <td class=format!("{TD} font-mono")>{from}{forwarded}</td>
            <td class=format!("{TD} font-mono")>
                <a class=LINK href=audit_with("action", &entry.action)>{entry.action.clone()}</a>
                {refused}
            </td>
            <td class=TD>{subject}</td>
            <td class=format!("{TD} max-w-xs text-slate-700")>{entry.detail.clone()}</td>
        </tr>
    }
}
