//! `/targets`: every target with live runs or operator settings — what
//! holds it, how many runs wait for it, its capacity and whether it is
//! paused — with the operator's brakes on it, which apply in every plan.

use chrono::{DateTime, Utc};
use leptos::prelude::*;
use leptos_meta::Title;

use crate::components::actions::{BUTTON, DisabledButton, OPERATORS_ONLY, PLAIN, outcome};
use crate::components::feed::Feed;
use crate::components::links::runs_with;
use crate::components::live::use_live;
use crate::components::loaded::loaded;
use crate::components::notice::EmptyState;
use crate::components::session::may_act;
use crate::components::tables::{DataTable, LINK, TD};
use crate::components::time::Ago;
use crate::error::DashboardError;
use domain::model::TargetView;
use domain::views::{TargetAction, TargetsPage};

#[server(prefix = "/_fn", endpoint = "targets")]
pub async fn load_targets() -> Result<TargetsPage, DashboardError> {
    crate::backend::source()?.targets().await
}

/// Pauses, resumes or sets the capacity of `target` (`capacity` as typed,
/// empty removes it); answers with a line for the page.
#[server(prefix = "/_fn", endpoint = "target_act")]
pub async fn target_act(
    kind: TargetAction,
    target: String,
    capacity: Option<String>,
) -> Result<String, DashboardError> {
    let who = crate::backend::identity()?;
    let change = kind
        .change(capacity.as_deref())
        .map_err(|message| DashboardError::Invalid {
            message,
            field: Some("capacity".into()),
        })?;
    crate::backend::source()?
        .target_act(&who, &target, change)
        .await?;
    Ok(change.done_message(target.trim()))
}

#[component]
pub fn TargetsListPage() -> impl IntoView {
    let action = ServerAction::<TargetAct>::new();
    let live = use_live(|| Feed::Targets);
    let data = Resource::new(
        move || (live.track(), action.version().get()),
        move |_| live.or_fetch(load_targets()),
    );
    view! {
        <Title text="Targets · Baton" />
        <section class="space-y-4">
            <h1 class="text-2xl font-semibold tracking-tight">"Targets"</h1>
            <p class="max-w-3xl text-sm text-slate-700">
                "A target is what a task works on (db/orders). An exclusive run holds it alone; shared runs hold it together, up to its capacity. Pausing a target stops new runs on it in every plan; runs already ready or running carry on."
            </p>
            <div id="action-result" role="status" aria-live="polite">
                {move || action.value().get().map(outcome)}
            </div>
            {loaded(
                data,
                move |p| {
                    if p.targets.is_empty() {
                        view! {
                            <EmptyState id="targets-empty">
                                "No target has live runs or settings. A target shows here while runs wait for it or hold it, or once an operator pauses it or sets its capacity (baton target pause|capacity)."
                            </EmptyState>
                        }
                            .into_any()
                    } else {
                        view! { <TargetTable targets=p.targets now=p.now action /> }.into_any()
                    }
                },
            )}
        </section>
    }
}

#[component]
fn TargetTable(
    targets: Vec<TargetView>,
    now: DateTime<Utc>,
    action: ServerAction<TargetAct>,
) -> impl IntoView {
    let rows = targets
        .into_iter()
        .map(|t| view! { <TargetRow t now action /> })
        .collect_view();
    let columns = vec![
        "Target", "Held by", "Waiting", "Capacity", "Paused", "Actions",
    ];
    view! {
        <DataTable id="targets" caption="Targets, what holds them and their settings" columns>
            {rows}
        </DataTable>
    }
}

#[component]
fn TargetRow(t: TargetView, now: DateTime<Utc>, action: ServerAction<TargetAct>) -> impl IntoView {
    let name = t.target.clone();
    let held = match t.first_holder {
        Some(first) if t.holding > 0 => {
            let runs = if t.holding == 1 {
                "1 run".to_owned()
            } else {
                format!("{} runs", t.holding)
            };
            let how = if t.held_exclusively {
                "exclusive"
            } else {
                "shared"
            };
            view! {
                <span class="holders">
                    {runs} ", first "
                    <a class=LINK href=format!("/runs/{first}")>{format!("#{first}")}</a>
                    <span class="text-xs text-slate-600">{format!(" ({how})")}</span>
                </span>
            }
            .into_any()
        }
        _ => view! { <span class="text-slate-500">"free"</span> }.into_any(),
    };
    // Said beside what holds it: "free, 1 waiting" hid that the waiting
    // runs cannot start until an operator acts.
    let halted = t.halted_by.clone().map(|h| {
        view! {
            <p class="halted-line text-xs font-medium text-red-800">
                {format!("line halted at version {} by ", h.version)}
                <a class=LINK href=format!("/runs/{}", h.run_id)>{format!("run #{}", h.run_id)}</a>
                {format!(" ({}): retry or skip it", h.status.as_str())}
            </p>
        }
    });
    let capacity = match t.capacity {
        Some(c) => {
            view! { <span class="tabular-nums">{format!("{} of {c} in use", t.holding)}</span> }
                .into_any()
        }
        None => view! { <span class="text-slate-500" title="no limit">"—"</span> }.into_any(),
    };
    let paused = match (&t.paused_by, t.paused_at) {
        (Some(by), at) => {
            let at = at.map(|at| view! { " " <Ago at now /> });
            view! {
                <span class="paused-by font-medium text-amber-900">{format!("by {by}")}{at}</span>
            }
            .into_any()
        }
        (None, _) => view! { <span class="text-slate-500">"—"</span> }.into_any(),
    };
    let brake = if t.paused_by.is_some() {
        view! { <TargetButton action kind=TargetAction::Resume target=name.clone() label="Resume" /> }
    } else {
        view! { <TargetButton action kind=TargetAction::Pause target=name.clone() label="Pause" /> }
    };
    let label = name.clone();
    let row = name.clone();
    view! {
        <tr
            data-target=row
            data-paused=t.paused_by.is_some().to_string()
            data-capacity=t.capacity.map(|c| c.to_string()).unwrap_or_default()
        >
            <td class=format!("{TD} font-mono font-medium break-all")>
                <a class=LINK href=runs_with("target", &label)>{label.clone()}</a>
            </td>
            <td class=TD>{held}{halted}</td>
            <td class=format!("{TD} tabular-nums")>{t.waiting}</td>
            <td class=TD>{capacity}</td>
            <td class=TD>{paused}</td>
            <td class=TD>
                <div class="flex flex-wrap items-center gap-2">
                    {brake}
                    <CapacityForm action target=name capacity=t.capacity />
                </div>
            </td>
        </tr>
    }
}

/// Pause or Resume for one target; a plain form, so it works without
/// JavaScript too.
#[component]
fn TargetButton(
    action: ServerAction<TargetAct>,
    kind: TargetAction,
    target: String,
    label: &'static str,
) -> impl IntoView {
    let aria = format!("{label} target {target}");
    if !may_act() {
        return view! { <DisabledButton label aria action=kind.as_str() why=Some(OPERATORS_ONLY) /> }
            .into_any();
    }
    view! {
        <ActionForm action attr:class="inline">
            <input type="hidden" name="kind" value=kind.as_str() />
            <input type="hidden" name="target" value=target />
            <button type="submit" class=format!("{BUTTON} {PLAIN}") aria-label=aria data-action=kind.as_str()>
                {label}
            </button>
        </ActionForm>
    }
    .into_any()
}

/// Sets the target's capacity; Remove clears it. Operators only.
#[component]
fn CapacityForm(
    action: ServerAction<TargetAct>,
    target: String,
    capacity: Option<i64>,
) -> impl IntoView {
    if !may_act() {
        return ().into_any();
    }
    let remove = capacity.map(|_| {
        let target = target.clone();
        view! {
            <ActionForm action attr:class="inline">
                <input type="hidden" name="kind" value=TargetAction::Capacity.as_str() />
                <input type="hidden" name="target" value=target.clone() />
                <input type="hidden" name="capacity" value="" />
                <button
                    type="submit"
                    class=format!("{BUTTON} {PLAIN}")
                    aria-label=format!("Remove the capacity of target {target}")
                    data-action="capacity_remove"
                >
                    "No limit"
                </button>
            </ActionForm>
        }
    });
    view! {
        <ActionForm action attr:class="inline-flex items-center gap-1">
            <input type="hidden" name="kind" value=TargetAction::Capacity.as_str() />
            <input type="hidden" name="target" value=target.clone() />
            <input
                type="number"
                name="capacity"
                min="1"
                step="1"
                required
                value=capacity.map(|c| c.to_string())
                placeholder="runs"
                aria-label=format!("Capacity of target {target}")
                class="w-20 rounded-sm border border-slate-400 bg-white px-2 py-1 text-sm"
            />
            <button
                type="submit"
                class=format!("{BUTTON} {PLAIN}")
                aria-label=format!("Set the capacity of target {target}")
                data-action="capacity_set"
            >
                "Set capacity"
            </button>
        </ActionForm>
        {remove}
    }
    .into_any()
}
