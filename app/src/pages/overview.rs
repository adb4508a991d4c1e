//! `/`: what runs where, what failed, how fast work is going, and whether
//! notifications go out — the page an operator opens first in an incident.

use std::collections::BTreeMap;

use leptos::prelude::*;

use crate::components::chart::ThroughputChart;
use crate::components::feed::Feed;
use crate::components::links::runs_with;
use crate::components::live::use_live;
use crate::components::loaded::loaded;
use crate::components::notice::EmptyState;
use crate::components::status::{ProgressBar, task_status_class};
use crate::components::tables::{DeliveryTable, LINK, ReplicaTable};
use crate::components::time::Ago;
use crate::error::DashboardError;
use domain::model::{RunStatus, TaskStatus};
use domain::views::{Attention, FailureView, Overview};

#[server(prefix = "/_fn", endpoint = "overview")]
pub async fn load_overview() -> Result<Overview, DashboardError> {
    crate::backend::source()?.overview().await
}

#[component]
pub fn OverviewPage() -> impl IntoView {
    let live = use_live(|| Feed::Overview);
    let data = Resource::new(
        move || live.track(),
        move |_| live.or_fetch(load_overview()),
    );
    view! {
        <section class="space-y-6">
            <h1 class="text-2xl font-semibold tracking-tight">"Overview"</h1>
            {loaded(data, |o| view! { <OverviewBody o /> }.into_any())}
        </section>
    }
}

#[component]
fn OverviewBody(o: Overview) -> impl IntoView {
    let now = o.now;
    let breakdown: BTreeMap<TaskStatus, i64> = o
        .live
        .iter()
        .chain(o.last_hour.iter())
        .map(|(s, n)| (TaskStatus::from(*s), *n))
        .collect();
    let replicas = if o.replicas.is_empty() {
        view! { <EmptyState id="replicas-empty">"No replica has written a heartbeat yet."</EmptyState> }
            .into_any()
    } else {
        view! { <ReplicaTable replicas=o.replicas now /> }.into_any()
    };
    let failures = if o.failures.is_empty() {
        view! { <EmptyState id="failures-empty">"No run has failed. Failures appear here with their error."</EmptyState> }
            .into_any()
    } else {
        let items = o
            .failures
            .into_iter()
            .map(|f| view! { <FailureItem f now /> })
            .collect_view();
        view! { <ul id="failures" class="divide-y divide-slate-100 rounded-sm border border-slate-200 bg-white">{items}</ul> }
            .into_any()
    };
    let deliveries = if o.deliveries.is_empty() {
        view! {
            <EmptyState id="deliveries-empty">
                "No notification sent yet. Set BATON_WEBHOOK_URL or a plan's webhooks to be told when a plan fails or completes."
            </EmptyState>
        }
        .into_any()
    } else {
        view! { <DeliveryTable deliveries=o.deliveries now /> }.into_any()
    };
    let attention =
        (!o.attention.is_empty()).then(|| view! { <AttentionStrip items=o.attention /> });
    view! {
        {attention}
        <div class="grid gap-3 sm:grid-cols-2 lg:grid-cols-3">
            <CountGroup title="Now" counts=o.live statuses=&[RunStatus::Pending, RunStatus::Available, RunStatus::Running] />
            <CountGroup
                title="Finished in the last hour"
                counts=o.last_hour
                statuses=&[RunStatus::Done, RunStatus::Failed, RunStatus::Canceled]
            />
            <div class="space-y-2 rounded-sm border border-slate-200 bg-white p-4 sm:col-span-2 lg:col-span-1">
                <h2 class="text-sm font-semibold text-slate-700">"Status breakdown"</h2>
                <ProgressBar counts=breakdown />
                <p class="text-xs text-slate-600">"Runs live now and finished in the last hour."</p>
            </div>
        </div>
        <section class="space-y-2 rounded-sm border border-slate-200 bg-white p-4">
            <h2 class="text-sm font-semibold text-slate-700">"Runs finished per minute, last hour"</h2>
            <ThroughputChart minutes=o.per_minute />
        </section>
        <section class="space-y-2">
            <h2 class="text-lg font-semibold">"Replicas"</h2>
            {replicas}
        </section>
        <section class="space-y-2">
            <h2 class="text-lg font-semibold">"Recent failures"</h2>
            {failures}
        </section>
        <section class="space-y-2">
            <h2 class="text-lg font-semibold">"Recent webhook deliveries"</h2>
            {deliveries}
            <p class="text-sm"><a class=LINK href="/deliveries">"All deliveries"</a></p>
        </section>
    }
}

/// What will not move without an operator, each linked to where to act;
/// absent when nothing waits.
#[component]
fn AttentionStrip(items: Vec<Attention>) -> impl IntoView {
    let items = items
        .into_iter()
        .map(|a| {
            view! {
                <li data-kind=a.kind.as_str()>
                    <a class=LINK href=a.href>{a.text}</a>
                </li>
            }
        })
        .collect_view();
    view! {
        <section id="attention" class="space-y-2 rounded-sm border border-amber-300 bg-amber-50 p-4">
            <h2 class="text-sm font-semibold text-amber-900">"Needs attention"</h2>
            <ul class="list-disc space-y-1 pl-5 text-sm">{items}</ul>
        </section>
    }
}

/// A few statuses with their counts, as large numbers in status colours.
#[component]
fn CountGroup(
    title: &'static str,
    counts: BTreeMap<RunStatus, i64>,
    statuses: &'static [RunStatus],
) -> impl IntoView {
    let cells = statuses
        .iter()
        .map(|&status| {
            let n = counts.get(&status).copied().unwrap_or(0);
            view! {
                <div class="flex flex-col gap-1" data-count=status.as_str()>
                    <span class=format!(
                        "w-fit rounded-sm px-1.5 py-0.5 text-xs font-medium {}",
                        task_status_class(TaskStatus::from(status)),
                    )>{status.as_str()}</span>
                    <span class="text-2xl font-semibold tabular-nums">{n}</span>
                </div>
            }
        })
        .collect_view();
    view! {
        <div class="space-y-2 rounded-sm border border-slate-200 bg-white p-4">
            <h2 class="text-sm font-semibold text-slate-700">{title}</h2>
            <div class="grid grid-cols-3 gap-2">{cells}</div>
        </div>
    }
}

#[component]
fn FailureItem(f: FailureView, now: chrono::DateTime<chrono::Utc>) -> impl IntoView {
    view! {
        <li class="space-y-1 px-4 py-3 text-sm" data-run-id=f.run_id>
            <div class="flex flex-wrap items-baseline gap-x-2">
                <a class=format!("{LINK} font-medium") href=format!("/runs/{}", f.run_id)>
                    {format!("{} (attempt {})", f.task_name, f.attempt)}
                </a>
                <span class="text-slate-600">"in"</span>
                <a class=LINK href=format!("/plans/{}", f.plan_id)>{f.plan_name}</a>
                <span class="text-slate-600">"on"</span>
                <a class=LINK href=runs_with("target", &f.target)>{f.target.clone()}</a>
                <span class="ml-auto text-xs text-slate-600"><Ago at=f.finished_at now /></span>
            </div>
            <p class="font-mono text-xs break-words text-red-800">
                {f.error.unwrap_or_else(|| "no error recorded".to_owned())}
            </p>
        </li>
    }
}
