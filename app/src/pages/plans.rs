//! The plans list: newest first, filterable by status, refreshed live.

use leptos::prelude::*;

use crate::components::live::{REFRESH_EVERY, use_tick};
use crate::components::status::{PlanStatusBadge, TaskCountBadge};
use crate::model::{PlanList, PlanStatus, PlanSummary};

const PAGE_SIZE: i64 = 50;

/// A page of plans, optionally only those whose status is spelled `status`.
#[server(prefix = "/_fn", endpoint = "list_plans")]
pub async fn list_plans(
    status: Option<String>,
    limit: i64,
    offset: i64,
) -> Result<PlanList, ServerFnError> {
    use crate::backend::Backend;

    let status = match status.as_deref() {
        None | Some("") => None,
        Some(text) => Some(
            PlanStatus::parse(text)
                .ok_or_else(|| ServerFnError::new(format!("unknown plan status {text:?}")))?,
        ),
    };
    let Backend(source) = use_context::<Backend>()
        .ok_or_else(|| ServerFnError::new("the dashboard is not connected to the engine"))?;
    // The source already words its errors for users; nothing more leaks.
    source
        .plan_list(status, limit.clamp(1, 500), offset.max(0))
        .await
        .map_err(ServerFnError::new)
}

#[component]
pub fn PlansPage() -> impl IntoView {
    let (status, set_status) = signal(String::new());
    let tick = use_tick(REFRESH_EVERY);
    let plans = Resource::new(
        move || (status.get(), tick.get()),
        |(status, _)| list_plans((!status.is_empty()).then_some(status), PAGE_SIZE, 0),
    );

    view! {
        <section class="space-y-4">
            <div class="flex flex-wrap items-center justify-between gap-3">
                <h1 class="text-2xl font-semibold tracking-tight">"Plans"</h1>
                <label class="flex items-center gap-2 text-sm text-slate-600">
                    "Status"
                    <select
                        id="plan-status-filter"
                        class="rounded-sm border border-slate-300 bg-white px-2 py-1 text-sm"
                        prop:value=move || status.get()
                        on:change=move |ev| set_status.set(event_target_value(&ev))
                    >
                        <option value="">"All"</option>
                        {PlanStatus::ALL
                            .into_iter()
                            .map(|s| view! { <option value=s.as_str()>{s.as_str()}</option> })
                            .collect_view()}
                    </select>
                </label>
            </div>
            <Transition fallback=|| view! { <p class="text-sm text-slate-500">"Loading plans…"</p> }>
                {move || {
                    plans
                        .get()
                        .map(|result| match result {
                            Ok(list) => view! { <PlanTable list filtered=!status.get_untracked().is_empty() /> }.into_any(),
                            Err(err) => {
                                view! {
                                    <p role="alert" class="rounded-sm border border-red-200 bg-red-50 px-3 py-2 text-sm text-red-800">
                                        "Could not load plans: " {err.to_string()}
                                    </p>
                                }
                                    .into_any()
                            }
                        })
                }}
            </Transition>
        </section>
    }
}

#[component]
fn PlanTable(list: PlanList, filtered: bool) -> impl IntoView {
    if list.plans.is_empty() {
        let message = if filtered {
            "No plans have this status."
        } else {
            "No plans yet. Submit one with `baton submit plan.yaml` or POST /api/v1/plans."
        };
        return view! {
            <div id="plans-empty" class="rounded-sm border border-dashed border-slate-300 bg-white px-4 py-10 text-center text-slate-500">
                {message}
            </div>
        }
        .into_any();
    }
    let shown = list.plans.len();
    view! {
        <div class="overflow-x-auto rounded-sm border border-slate-200 bg-white shadow-sm">
            <table id="plans" class="min-w-full divide-y divide-slate-200 text-sm">
                <thead class="bg-slate-50 text-left text-xs uppercase tracking-wide text-slate-500">
                    <tr>
                        <th class="px-4 py-2 font-medium">"ID"</th>
                        <th class="px-4 py-2 font-medium">"Name"</th>
                        <th class="px-4 py-2 font-medium">"Status"</th>
                        <th class="px-4 py-2 font-medium">"Tasks"</th>
                        <th class="px-4 py-2 font-medium">"Created"</th>
                    </tr>
                </thead>
                <tbody class="divide-y divide-slate-100">
                    {list.plans.into_iter().map(|plan| view! { <PlanRow plan /> }).collect_view()}
                </tbody>
            </table>
        </div>
        <p class="text-xs text-slate-500">{format!("Showing {shown} of {} plans.", list.total)}</p>
    }
    .into_any()
}

#[component]
fn PlanRow(plan: PlanSummary) -> impl IntoView {
    let created = plan.created_at.format("%Y-%m-%d %H:%M:%S UTC").to_string();
    view! {
        <tr class="hover:bg-slate-50" data-plan-id=plan.id>
            <td class="px-4 py-2 font-mono text-slate-500 tabular-nums">{plan.id}</td>
            <td class="px-4 py-2 font-medium">{plan.name}</td>
            <td class="px-4 py-2">
                <PlanStatusBadge status=plan.status />
            </td>
            <td class="px-4 py-2">
                <div class="flex flex-wrap gap-1">
                    {plan
                        .counts
                        .into_iter()
                        .map(|(status, count)| view! { <TaskCountBadge status count /> })
                        .collect_view()}
                </div>
            </td>
            <td class="px-4 py-2 whitespace-nowrap text-slate-500">{created}</td>
        </tr>
    }
}
