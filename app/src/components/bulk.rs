//! The bulk bar of a filtered list (Runs, Plans): Retry, Cancel and Skip
//! all. Each is a link to the same list with `confirm=<action>`: the
//! server then counts what the action would change (counting is not free
//! with a large history, so it happens only on the way to an action) and
//! the page asks, its confirming form carrying the filter and that count.
//! Links and a plain form, so it works without JavaScript.
//!
//! The result line ("Retried 12 runs.", `#bulk-result`) is the action's
//! answer in the page with JavaScript. A plain form post (no JavaScript)
//! cannot carry an answer back, so its server function sends the browser
//! to the list with the result in the URL (`done=retry&changed=12`,
//! `back_to_list`) and the page shows the same line from there
//! (`reported`). A refusal needs nothing of ours: Leptos itself sends a
//! plain form post that failed back to the page it came from with the
//! error in `__err`, and the page's `ServerAction` starts with it, so it
//! shows in the same place (still asking, with the count taken again).

use leptos::prelude::*;
use leptos_router::params::ParamsMap;

use crate::components::actions::{BUTTON, OPERATORS_ONLY, PLAIN};
use crate::components::tables::LINK;
use crate::error::DashboardError;
use domain::search::{BulkAction, BulkResult};

/// Most runs one bulk action changes (the server's limit, said up front).
pub const MAX_BULK_RUNS: i64 = 10_000;

/// The bar: `lead` ("Every run this search matches:"), a link per action
/// that `offered` lets through to `href(action)` (a disabled button for a
/// viewer), and the confirmation `panel` when one is asked.
pub fn bulk_bar(
    lead: &'static str,
    href: impl Fn(BulkAction) -> String,
    offered: impl Fn(BulkAction) -> bool,
    panel: Option<AnyView>,
) -> AnyView {
    let allowed = crate::components::session::may_act();
    let links = BulkAction::ALL
        .into_iter()
        .filter(|action| offered(*action))
        .map(|action| {
            let name = action.as_str();
            let label = format!("{} all…", action.label());
            if !allowed {
                return view! {
                    <button type="button" class=format!("{BUTTON} {PLAIN}") disabled title=OPERATORS_ONLY data-bulk=name>
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

/// The result line for `#bulk-result`: this page's own post's answer
/// (`value`, with JavaScript), else the one a plain form post reported
/// through the URL ([`reported`]).
pub fn result_line(
    value: Option<Result<String, DashboardError>>,
    query: &ParamsMap,
) -> Option<Result<String, DashboardError>> {
    value.or_else(|| reported(query).map(|done| Ok(done_line(&done))))
}

/// What a plain form post reported: `done=<action>&changed=<n>`, set by
/// `back_to_list`. Anything else shows nothing.
///
/// Anyone can write these two parameters into a link, so a shared or
/// crafted link shows the line too, to someone who did nothing. That is
/// acceptable because it can say no more than one of three verbs and a
/// count up to the bulk limit (no text of the link's own reaches the
/// page), it changes nothing, and the Audit page, not this line, is the
/// record of who changed what. The links and the live feed of the page
/// leave both parameters out, so the line goes at the next step.
pub fn reported(query: &ParamsMap) -> Option<BulkResult> {
    let action = BulkAction::parse(&query.get("done")?)?;
    let changed = query
        .get("changed")?
        .parse::<i64>()
        .ok()
        .filter(|n| (0..=MAX_BULK_RUNS).contains(n))?;
    Some(BulkResult { action, changed })
}

/// Parameters of a list's URL that belong to one step, not to the list:
/// the question, a result, and Leptos's error of a plain form post.
#[cfg(feature = "ssr")]
const ONE_STEP: [&str; 6] = ["confirm", "done", "changed", "__path", "__err", "__errsig"];

/// After a bulk action a plain form post (no JavaScript) asked for, sends
/// the browser to the list at `path` with the result in its URL. The list
/// is the one the post came from (its `Referer`, so a relative time stays
/// relative), else `fallback` (a query string of the posted filter);
/// either way without `confirm`, so the question is not asked again.
/// Posts from the page's own script are left alone: they read the answer.
#[cfg(feature = "ssr")]
pub fn back_to_list(path: &str, fallback: &str, done: &BulkResult) {
    use http::header::{ACCEPT, REFERER};

    let Some(parts) = use_context::<http::request::Parts>() else {
        return;
    };
    let header = |name| parts.headers.get(name).and_then(|v| v.to_str().ok());
    // How Leptos itself tells a plain form post from its own client
    // (leptos_axum's `redirect`, server_fn's form redirects).
    if header(ACCEPT).is_some_and(|accept| accept.contains("text/html")) {
        leptos_axum::redirect(&list_after(path, header(REFERER), fallback, done));
    }
}

/// The list at `path` with the query of `referer` when it is that list
/// (else `fallback`), less [`ONE_STEP`], plus the result. Only the query
/// is taken from the referer, never its origin or path.
#[cfg(feature = "ssr")]
fn list_after(path: &str, referer: Option<&str>, fallback: &str, done: &BulkResult) -> String {
    let query = referer
        .and_then(|referer| {
            let local = match referer.split_once("://") {
                Some((_, rest)) => &rest[rest.find('/')?..],
                None => referer,
            };
            let local = local.split('#').next().unwrap_or_default();
            let (local_path, query) = local.split_once('?').unwrap_or((local, ""));
            (local_path == path).then_some(query)
        })
        .unwrap_or(fallback);
    let result = [
        format!("done={}", done.action.as_str()),
        format!("changed={}", done.changed),
    ];
    let params = query
        .split('&')
        .filter(|pair| {
            let name = pair.split('=').next().unwrap_or_default();
            !pair.is_empty() && !ONE_STEP.contains(&name)
        })
        .map(str::to_owned)
        .chain(result)
        .collect::<Vec<_>>();
    format!("{path}?{}", params.join("&"))
}

#[cfg(test)]
mod tests {
    use leptos_router::params::ParamsMap;

    use super::{BulkAction, BulkResult, reported};

    fn query(pairs: &[(&str, &str)]) -> ParamsMap {
        let mut map = ParamsMap::new();
        for (name, value) in pairs {
            map.insert(name.to_string(), (*value).to_owned());
        }
        map
    }

    #[test]
    fn only_a_known_action_and_a_bounded_count_are_reported() {
        let done = reported(&query(&[("done", "retry"), ("changed", "6")]));
        assert_eq!(
            done,
            Some(BulkResult {
                action: BulkAction::Retry,
                changed: 6
            })
        );
        for pairs in [
            &[("done", "<b>retry</b>"), ("changed", "6")][..],
            &[("done", "retry"), ("changed", "-1")],
            &[("done", "retry"), ("changed", "10001")],
            &[("done", "retry"), ("changed", "6 runs")],
            &[("done", "retry")],
            &[("changed", "6")],
        ] {
            assert_eq!(reported(&query(pairs)), None, "{pairs:?}");
        }
    }

    #[cfg(feature = "ssr")]
    #[test]
    fn the_list_after_keeps_the_referers_filter_and_drops_the_step() {
        use super::list_after;

        let done = BulkResult {
            action: BulkAction::Cancel,
            changed: 3,
        };
        assert_eq!(
            list_after(
                "/runs",
                Some(
                    "http://127.0.0.1:3000/runs?status=FAILED&since=1h&confirm=cancel&__path=%2F_fn%2Fruns_bulk&__err=eyJ9#top"
                ),
                "status=FAILED&since=2026-11-26T08:00:00Z",
                &done
            ),
            "/runs?status=FAILED&since=1h&done=cancel&changed=3"
        );
        // A referer that is not this list (or none): the posted filter.
        // The referer's origin or path is never taken.
        assert_eq!(
            list_after(
                "/plans",
                Some("https://elsewhere.example/plans?q=x"),
                "",
                &done
            ),
            "/plans?q=x&done=cancel&changed=3"
        );
        for referer in [
            Some("https://elsewhere.example/evil?q=x"),
            Some("https://elsewhere.example?q=x"),
            Some("//elsewhere.example/plans"),
            None,
        ] {
            assert_eq!(
                list_after("/plans", referer, "status=FAILED&q=e2e", &done),
                "/plans?status=FAILED&q=e2e&done=cancel&changed=3",
                "{referer:?}"
            );
        }
        assert_eq!(
            list_after("/plans", Some("/plans?done=retry&changed=9"), "", &done),
            "/plans?done=cancel&changed=3"
        );
    }
}
