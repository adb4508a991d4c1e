//! Operator actions (docs/design.md, "Operator actions") as forms: each
//! posts to the `act` server function, so it works as a plain HTML form
//! without JavaScript (the server redirects back to the page) and as an
//! in-page request with it.
//!
//! A button is only enabled when the action applies to the current status;
//! destructive actions (cancel, skip) first open a confirmation.

use leptos::prelude::*;

use crate::components::notice::ErrorNotice;
use crate::components::session::may_act;
use crate::error::DashboardError;
use domain::views::Action;

/// Applies `kind` to plan or task `id`; answers with a line for the page.
#[server(prefix = "/_fn", endpoint = "act")]
pub async fn act(kind: Action, id: i64) -> Result<String, DashboardError> {
    let who = crate::backend::identity()?;
    crate::backend::source()?.act(&who, kind, id).await?;
    Ok(kind.done_message(id))
}

// Shortcuts defined in style/encre-css.toml (they repeat on every task row).
pub const BUTTON: &str = "btn";
pub const PLAIN: &str = "btn-plain";
const DANGER: &str = "btn-danger";

/// Why a viewer's action buttons are disabled (their title).
pub const OPERATORS_ONLY: &str = "Only operators can do this";

/// An action shown but not offered: to a viewer, or where it does not
/// apply. `why` becomes the button's title; `action` its `data-action`,
/// as on the enabled button, so tests find either.
#[component]
pub fn DisabledButton(
    label: &'static str,
    aria: String,
    action: &'static str,
    why: Option<&'static str>,
) -> impl IntoView {
    view! {
        <button type="button" class=format!("{BUTTON} {PLAIN}") disabled title=why aria-label=aria data-action=action>
            {label}
        </button>
    }
}

/// One action button for plan or task `id`.
///
/// `label` is what the button says; `subject` names what it acts on for
/// screen readers ("task migrate-orders"). With `confirm`, the button opens
/// a disclosure that asks the question and holds the real button.
#[component]
pub fn ActionButton(
    action: ServerAction<Act>,
    kind: Action,
    id: i64,
    enabled: bool,
    label: &'static str,
    subject: String,
    #[prop(optional)] confirm: Option<&'static str>,
) -> impl IntoView {
    let aria = format!("{label} {subject}");
    let name = kind.as_str();
    let allowed = may_act();
    if !enabled || !allowed {
        let why = (!allowed).then_some(OPERATORS_ONLY);
        return view! { <DisabledButton label aria action=name why /> }.into_any();
    }
    let form = move |class: &'static str, text: String, aria: String| {
        view! {
            <ActionForm action attr:class="inline">
                <input type="hidden" name="kind" value=kind.as_str() />
                <input type="hidden" name="id" value=id />
                <button type="submit" class=format!("{BUTTON} {class}") aria-label=aria data-action=name>
                    {text}
                </button>
            </ActionForm>
        }
    };
    match confirm {
        None => form(PLAIN, label.to_owned(), aria).into_any(),
        Some(question) => view! {
            <details class="relative inline-block">
                <summary
                    class=format!("{BUTTON} {DANGER} cursor-pointer list-none")
                    aria-label=format!("{aria}…")
                    data-confirm=name
                >
                    {format!("{label}…")}
                </summary>
                <div class="popover">
                    <p class="text-slate-700">{question}</p>
                    {form(DANGER, format!("Yes, {}", label.to_lowercase()), format!("Confirm: {aria}"))}
                </div>
            </details>
        }
        .into_any(),
    }
}

/// A task's Retry, Cancel and Skip, the same on the plan page's rows and
/// the run page; each enabled where its status allows it.
#[component]
pub fn TaskButtons(
    action: ServerAction<Act>,
    task_id: i64,
    subject: String,
    can_retry: bool,
    can_cancel: bool,
    can_skip: bool,
) -> impl IntoView {
    view! {
        <ActionButton action kind=Action::TaskRetry id=task_id enabled=can_retry label="Retry" subject=subject.clone() />
        <ActionButton
            action
            kind=Action::TaskCancel
            id=task_id
            enabled=can_cancel
            label="Cancel"
            subject=subject.clone()
            confirm="Cancel this task? A running command is killed."
        />
        <ActionButton
            action
            kind=Action::TaskSkip
            id=task_id
            enabled=can_skip
            label="Skip"
            subject
            confirm="Skip this task? It counts as complete without running."
        />
    }
}

/// The latest action's outcome, announced politely to screen readers.
#[component]
pub fn ActionResult(action: ServerAction<Act>) -> impl IntoView {
    view! {
        <div id="action-result" role="status" aria-live="polite">
            {move || action.value().get().map(outcome)}
        </div>
    }
}

/// An action's result line: what was done, or why not. Pages with
/// actions of their own (targets) show theirs the same way.
pub fn outcome(result: Result<String, DashboardError>) -> AnyView {
    match result {
        Ok(message) => view! {
            <p class="rounded-sm border border-emerald-200 bg-emerald-50 px-3 py-2 text-sm text-emerald-900">
                {message}
            </p>
        }
        .into_any(),
        Err(error) => view! { <ErrorNotice error /> }.into_any(),
    }
}
