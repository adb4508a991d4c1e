//! The bulk bar of a filtered list (Runs, Plans): Retry, Cancel and Skip
//! all. Each is a link to the same list with `confirm=<action>`: the
//! server then counts what the action would change (counting is not free
//! with a large history, so it happens only on the way to an action) and
//! the page asks, its confirming form carrying the filter and that count.
//! Links and a plain form, so it works without JavaScript.

use leptos::prelude::*;

use crate::components::actions::{BUTTON, PLAIN};
use crate::components::tables::LINK;
use crate::search::{BulkAction, BulkResult};

/// Most runs one bulk action changes (the server's limit, said up front).
pub const MAX_BULK_RUNS: i64 = 10_000;

/// The bar: `lead` ("Every run this search matches:"), a link per action
/// to `href(action)` (a disabled button for a viewer), and the
/// confirmation `panel` when one is asked.
pub fn bulk_bar(
    lead: &'static str,
    href: impl Fn(BulkAction) -> String,
    panel: Option<AnyView>,
) -> AnyView {
    let allowed = crate::components::session::may_act();
    let links = BulkAction::ALL
        .into_iter()
        .map(|action| {
            let name = action.as_str();
            let label = format!("{} all…", action.label());
            if !allowed {
                return view! {
                    <button type="button" class=format!("{BUTTON} {PLAIN}") disabled title="Only operators can do this" data-bulk=name>
                        {label}
                    </button>
                }
                .into_any();
            }
            view! { <a class=format!("{BUTTON} btn-danger") href=href(action) data-bulk=name>{label}</a> }
                .into_any()
        })
        .collect_view();
    let panel = panel.filter(|_| allowed);
    view! {
        <div id="bulk" class="space-y-2">
            <div class="flex flex-wrap items-center justify-end gap-2 text-sm text-slate-700">
                <span>{lead}</span>
                {links}
            </div>
            {panel}
        </div>
    }
    .into_any()
}

/// The question's frame: `body` (the question and its form, or why there
/// is nothing to do) and a way back to the list without acting.
pub fn bulk_confirm(body: AnyView, back: String) -> AnyView {
    view! {
        <div id="bulk-confirm" class="rounded-sm border border-amber-300 bg-amber-50 px-3 py-2 text-sm text-slate-800 space-y-2">
            {body}
            <a class=LINK href=back>"Never mind"</a>
        </div>
    }
    .into_any()
}

/// What each action does beyond its name, for the question.
pub fn consequence(action: BulkAction) -> &'static str {
    match action {
        BulkAction::Retry => "Each task gets a new attempt.",
        BulkAction::Cancel => "Running ones are stopped.",
        BulkAction::Skip => "Their tasks count as done for what waits on them.",
    }
}

/// "run" or "runs".
pub fn runs_word(n: i64) -> &'static str {
    if n == 1 { "run" } else { "runs" }
}

/// The result line: "Retried 12 runs."
pub fn done_line(done: &BulkResult) -> String {
    let past = done.action.past();
    format!(
        "{}{} {} {}.",
        past[..1].to_uppercase(),
        &past[1..],
        done.changed,
        runs_word(done.changed)
    )
}
