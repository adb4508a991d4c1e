//! Tables more than one page shows: replicas and webhook deliveries.

use chrono::{DateTime, Utc};
use leptos::prelude::*;

use crate::components::drain::{DrainButton, WorkerAct};
use crate::components::time::{Ago, MaybeAgo};
use domain::model::{DeliveryView, ReplicaView, WorkerKind};

/// The frame every data table sits in: scrolls sideways on a phone rather
/// than squeezing columns.
const TABLE_FRAME: &str = "overflow-x-auto rounded-sm border border-slate-200 bg-white shadow-sm";
const TABLE: &str = "min-w-full divide-y divide-slate-200 text-sm";
const THEAD: &str = "bg-slate-50 text-left text-xs uppercase tracking-wide text-slate-600";
/// A table body: groups of a grouped table wear it too.
pub const TBODY: &str = "divide-y divide-slate-100";
// Shortcuts defined in style/encre-css.toml (they repeat on every row).
const TH: &str = "head-cell";
pub const TD: &str = "cell";
pub const LINK: &str = "link";

/// A data table in its frame: a caption for screen readers, one header
/// row of column names, and the rows given as children.
#[component]
pub fn DataTable(
    /// The table's `id`, if pages and tests need to find it.
    #[prop(optional)]
    id: Option<&'static str>,
    /// Extra classes on the table, e.g. a name tests use.
    #[prop(optional)]
    class: &'static str,
    caption: &'static str,
    columns: Vec<&'static str>,
    /// The children are `<tbody>` groups (each with its own heading row)
    /// rather than rows.
    #[prop(optional)]
    grouped: bool,
    children: Children,
) -> impl IntoView {
    let heads = columns
        .into_iter()
        .map(|name| view! { <th scope="col" class=TH>{name}</th> })
        .collect_view();
    let body = if grouped {
        children().into_any()
    } else {
        view! { <tbody class=TBODY>{children()}</tbody> }.into_any()
    };
    view! {
        <div class=TABLE_FRAME>
            <table id=id class=format!("{TABLE} {class}")>
                <caption class="sr-only">{caption}</caption>
                <thead class=THEAD>
                    <tr>{heads}</tr>
                </thead>
                {body}
            </table>
        </div>
    }
}

/// The replicas and agents; with `drain`, a column of Drain and Resume
/// buttons (the Replicas page; the overview only shows them).
#[component]
pub fn ReplicaTable(
    replicas: Vec<ReplicaView>,
    now: DateTime<Utc>,
    #[prop(optional)] drain: Option<ServerAction<WorkerAct>>,
) -> impl IntoView {
    let rows = replicas
        .into_iter()
        .map(|r| {
            let state = if r.alive {
                view! {
                    <span class="inline-flex items-center gap-1 rounded-sm bg-emerald-100 px-2 py-0.5 text-xs font-medium text-emerald-800 ring-1 ring-emerald-300">
                        "alive"
                    </span>
                }
                .into_any()
            } else {
                view! {
                    <span class="inline-flex items-center gap-1 rounded-sm bg-red-100 px-2 py-0.5 text-xs font-medium text-red-800 ring-1 ring-red-300">
                        "stale"
                    </span>
                }
                .into_any()
            };
            let leader = r.leader.then(|| {
                view! {
                    <span
                        class="ml-2 rounded-sm bg-indigo-100 px-1.5 py-0.5 text-xs font-medium text-indigo-800 ring-1 ring-indigo-300"
                        title="holds the leader lease: promotes and sweeps"
                    >
                        "leader"
                    </span>
                }
            });
            // Baton keeps to the database's clock, but the host's commands
            // and logs do not: worth mending.
            let clock = r.clock_note().map(|note| {
                view! {
                    <span
                        class="ml-2 rounded-sm bg-amber-100 px-1.5 py-0.5 text-xs font-medium text-amber-900 ring-1 ring-amber-300"
                        data-clock-skew=r.clock_skew_ms.to_string()
                        title="this host's clock is off; Baton schedules by the database's clock, but commands run here see the host's"
                    >
                        {note}
                    </span>
                }
            });
            let draining = r.draining_since.map(|since| {
                let by = r.draining_by.clone().unwrap_or_default();
                view! {
                    <span
                        class="ml-2 rounded-sm bg-amber-100 px-1.5 py-0.5 text-xs font-medium text-amber-900 ring-1 ring-amber-300"
                        data-draining-by=by.clone()
                        title=format!("takes no new run; drained by {by}")
                    >
                        "draining"
                    </span>
                    " "
                    <Ago at=since now />
                }
            });
            let button = drain.map(|action| {
                view! {
                    <td class=TD>
                        <DrainButton action worker=r.replica_id.clone() draining=r.draining_since.is_some() />
                    </td>
                }
            });
            let labels = if r.labels.is_empty() {
                "—".to_owned()
            } else {
                r.labels.join(", ")
            };
            let id = r.replica_id.clone();
            let kind = match r.kind {
                WorkerKind::Replica => "replica",
                WorkerKind::Agent => "agent",
            };
            view! {
                <tr
                    data-replica-id=id
                    data-kind=kind
                    data-alive=r.alive.to_string()
                    data-leader=r.leader.to_string()
                    data-draining=r.draining_since.is_some().to_string()
                >
                    <td class=format!("{TD} font-mono whitespace-nowrap")>
                        <a class=LINK href=crate::components::links::runs_with("replica", &r.replica_id)>{r.replica_id.clone()}</a>
                        {leader}
                    </td>
                    <td class=TD>{kind}</td>
                    <td class=TD>{r.hostname}</td>
                    <td class=TD>{labels}</td>
                    <td class=TD>{state}{draining}{clock}</td>
                    <td class=TD><Ago at=r.last_heartbeat now /></td>
                    <td class=format!("{TD} tabular-nums")>{r.running}</td>
                    <td class=TD>{r.version}</td>
                    <td class=TD><Ago at=r.started_at now /></td>
                    {button}
                </tr>
            }
        })
        .collect_view();
    let mut columns = vec![
        "Id",
        "Kind",
        "Host",
        "Labels",
        "State",
        "Heartbeat",
        "Running",
        "Version",
        "Started",
    ];
    if drain.is_some() {
        columns.push("Actions");
    }
    view! {
        <DataTable id="replicas" caption="Replicas and agents, and their heartbeats" columns>
            {rows}
        </DataTable>
    }
}

/// Colour of a delivery state: delivered, still trying, given up.
fn delivery_state_class(state: &str) -> &'static str {
    match state {
        "DELIVERED" => "bg-emerald-100 text-emerald-800 ring-emerald-300",
        "FAILED" => "bg-red-100 text-red-800 ring-red-300",
        _ => "bg-amber-100 text-amber-800 ring-amber-300",
    }
}

#[component]
pub fn DeliveryTable(
    deliveries: Vec<DeliveryView>,
    now: DateTime<Utc>,
    /// Leave the plan column out (the plan page shows one plan's).
    #[prop(optional)]
    hide_plan: bool,
) -> impl IntoView {
    let rows = deliveries
        .into_iter()
        .map(|d| {
            let plan = (!hide_plan).then(|| {
                view! {
                    <td class=TD>
                        <a class=LINK href=format!("/plans/{}", d.plan_id)>{format!("plan {}", d.plan_id)}</a>
                    </td>
                }
            });
            let last = match (&d.last_status_code, &d.last_error) {
                (_, Some(error)) => error.clone(),
                (Some(code), None) => format!("HTTP {code}"),
                (None, None) => "—".to_owned(),
            };
            let next = match d.state.as_str() {
                "DELIVERED" => view! { <MaybeAgo at=d.delivered_at now /> }.into_any(),
                "PENDING" => view! { <MaybeAgo at=d.next_attempt_at now /> }.into_any(),
                _ => view! { <span class="text-slate-500">"gave up"</span> }.into_any(),
            };
            let attempts = d.attempts.len();
            let attempt_list = d
                .attempts
                .into_iter()
                .map(|a| {
                    let outcome = match (a.status_code, a.error) {
                        (Some(code), None) => format!("HTTP {code}"),
                        (Some(code), Some(e)) => format!("HTTP {code}: {e}"),
                        (None, Some(e)) => e,
                        (None, None) => "no answer".to_owned(),
                    };
                    view! {
                        <li>
                            {format!("#{} ", a.attempt)}
                            <Ago at=a.at now />
                            {format!(" by {}: {outcome}", a.replica_id)}
                        </li>
                    }
                })
                .collect_view();
            let state = d.state.clone();
            let state_class = delivery_state_class(&d.state);
            let url = d.url.clone();
            view! {
                <tr data-delivery-id=d.id data-state=state>
                    <td class=format!("{TD} font-mono text-xs") title=d.delivery_key.clone()>{d.id}</td>
                    {plan}
                    <td class=format!("{TD} font-medium")>{d.event}</td>
                    <td class=format!("{TD} max-w-64 truncate") title=url>{d.url}</td>
                    <td class=TD>
                        <span class=format!(
                            "inline-flex rounded-sm px-2 py-0.5 text-xs font-medium ring-1 {}",
                            state_class,
                        )>{d.state}</span>
                    </td>
                    <td class=TD>
                        <details>
                            <summary class="cursor-pointer tabular-nums">{attempts}</summary>
                            <ol class="mt-1 space-y-0.5 text-xs text-slate-700">{attempt_list}</ol>
                        </details>
                    </td>
                    <td class=format!("{TD} max-w-72 break-words text-slate-700")>{last}</td>
                    <td class=TD>{next}</td>
                    <td class=TD><Ago at=d.created_at now /></td>
                </tr>
            }
        })
        .collect_view();
    let columns = [
        "ID",
        "Plan",
        "Event",
        "URL",
        "State",
        "Attempts",
        "Last result",
        "Delivered / next",
        "Created",
    ]
    .into_iter()
    .filter(|c| !(hide_plan && *c == "Plan"))
    .collect();
    view! {
        <DataTable class="deliveries" caption="Webhook deliveries" columns>
            {rows}
        </DataTable>
    }
}
