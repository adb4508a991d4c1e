//! Drain and Resume for one replica or agent (docs/agents.md,
//! "Draining"): a drained worker takes no new run and finishes those it
//! has. A plain form, so it works without JavaScript too.

use leptos::prelude::*;

use crate::components::actions::{BUTTON, DisabledButton, OPERATORS_ONLY, PLAIN};
use crate::components::session::may_act;
use crate::error::DashboardError;
use domain::views::WorkerAction;

/// Drains `worker` or lifts its drain; answers with a line for the page.
#[server(prefix = "/_fn", endpoint = "worker_act")]
pub async fn worker_act(kind: WorkerAction, worker: String) -> Result<String, DashboardError> {
    let who = crate::backend::identity()?;
    crate::backend::source()?
        .worker_act(&who, &worker, kind)
        .await?;
    Ok(kind.done_message(&worker))
}

/// Drain (or Resume, while `draining`) for `worker`; disabled for viewers.
#[component]
pub fn DrainButton(
    action: ServerAction<WorkerAct>,
    worker: String,
    draining: bool,
) -> impl IntoView {
    let (kind, label) = match draining {
        true => (WorkerAction::Resume, "Resume"),
        false => (WorkerAction::Drain, "Drain"),
    };
    let aria = format!("{label} {worker}");
    if !may_act() {
        return view! { <DisabledButton label aria action=kind.as_str() why=Some(OPERATORS_ONLY) /> }
            .into_any();
    }
    let title = match draining {
        true => "take runs again",
        false => "take no new run; finish those running (runs pinned to its labels are reassigned)",
    };
    view! {
        <ActionForm action attr:class="inline">
            <input type="hidden" name="kind" value=kind.as_str() />
            <input type="hidden" name="worker" value=worker />
            <button type="submit" class=format!("{BUTTON} {PLAIN}") aria-label=aria title=title data-action=kind.as_str()>
                {label}
            </button>
        </ActionForm>
    }
    .into_any()
}
