//! Baton's dashboard, rendered on the server and hydrated in the browser.
//!
//! Layout:
//! - [`model`]: the JSON view types shared with the REST API; [`search`]:
//!   the runs search's filter and results, and the bulk actions on a runs
//!   search or the plans list; [`audit`]: the audit log's.
//! - [`views`]: what each page loads; [`error`]: the error its server
//!   functions return.
//! - `backend` (ssr only): the trait through which server functions reach
//!   the engine; the server crate implements it and provides it as context.
//! - [`pages`]: one module per page, each with the server functions it calls.
//! - [`components`]: pieces shared by pages (badges, tables, times, live
//!   refresh, actions).
//! - [`shell`] and [`App`]: the HTML document and the router; `hydrate` is
//!   the wasm entry point the page's hydration script calls.

// Leptos views are deeply nested types; without `--cfg erase_components`
// (release builds) computing their layout exceeds the default limit.
#![recursion_limit = "256"]

pub mod error;

#[cfg(feature = "ssr")]
pub mod backend;

pub mod components;
pub mod pages;

use leptos::prelude::*;
use leptos_meta::{MetaTags, Title, provide_meta_context};
use leptos_router::components::{A, Route, Router, Routes};
use leptos_router::{SsrMode, path};

use crate::components::notice::NotFound;
use crate::components::session::{
    OpenServerBanner, SessionBar, SignedIn, may_act, who_attribute, who_is_asking,
};
use crate::pages::{
    audit::AuditListPage, deliveries::DeliveriesListPage, login::LoginPage, overview::OverviewPage,
    plan::PlanDetailPage, plans::PlansListPage, replicas::ReplicasListPage, run::RunDetailPage,
    runs::RunsListPage, schedules::ScheduleDetailPage, schedules::SchedulesListPage,
    submit::SubmitPage, targets::TargetsListPage,
};

/// The whole HTML document; only ever rendered on the server.
/// `stylesheet` is the address the server serves the compiled CSS at.
pub fn shell(options: LeptosOptions, stylesheet: &'static str) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <link rel="icon" type="image/svg+xml" href="/favicon.svg" />
                <link rel="stylesheet" href=stylesheet />
                <AutoReload options=options.clone() />
                <HydrationScripts options />
                <MetaTags />
            </head>
            <body class="bg-slate-50 text-slate-900 antialiased" data-who=who_attribute()>
                <App />
            </body>
        </html>
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    provide_context(SignedIn(who_is_asking()));

    // Effects never run on the server, so this attribute appears only once
    // the wasm bundle has taken over the page: browser tests wait for it.
    let root = NodeRef::<leptos::html::Div>::new();
    Effect::new(move |_| {
        if let Some(el) = root.get() {
            let _ = el.set_attribute("data-hydrated", "true");
        }
    });
    crate::components::keys::slash_focuses_search();

    // Pages wait for their data before the first byte (SsrMode::Async):
    // the HTML is complete without JavaScript, and a missing plan or run
    // can still answer with a real 404 status.
    view! {
        // The one formatter every page's title goes through (the last one
        // given wins, so pages give none): see `unescaped_child_text`.
        <Title text="Baton" formatter=components::escape::unescaped_child_text />
        <Router>
            <div node_ref=root id="baton" class="min-h-screen">
                <a
                    href="#main"
                    class="sr-only focus:not-sr-only focus:absolute focus:top-2 focus:left-2 focus:rounded-sm focus:bg-white focus:px-3 focus:py-2"
                >
                    "Skip to content"
                </a>
                <OpenServerBanner />
                <header class="border-b border-slate-200 bg-white">
                    <div class="mx-auto flex max-w-7xl flex-wrap items-center gap-x-6 gap-y-2 px-4 py-3">
                        <a href="/" class="text-lg font-semibold tracking-tight">
                            "Baton"
                        </a>
                        <nav aria-label="Main" class="flex flex-wrap gap-x-4 gap-y-1 text-sm">
                            <NavLink href="/" label="Overview" />
                            <NavLink href="/plans" label="Plans" />
                            // Viewers are refused a submit: no link to a form they cannot send.
                            {may_act().then(|| view! { <NavLink href="/plans/new" label="Submit" /> })}
                            <NavLink href="/runs" label="Runs" />
                            <NavLink href="/schedules" label="Schedules" />
                            <NavLink href="/targets" label="Targets" />
                            <NavLink href="/replicas" label="Replicas" />
                            <NavLink href="/deliveries" label="Deliveries" />
                            <NavLink href="/audit" label="Audit" />
                        </nav>
                        <SessionBar />
                    </div>
                </header>
                <main id="main" class="mx-auto max-w-7xl px-4 py-6">
                    <Routes fallback=|| view! { <NotFound what="There is no page at this address.".to_owned() /> }>
                        <Route path=path!("/") view=OverviewPage ssr=SsrMode::Async />
                        <Route path=path!("/login") view=LoginPage ssr=SsrMode::Async />
                        <Route path=path!("/plans") view=PlansListPage ssr=SsrMode::Async />
                        <Route path=path!("/plans/new") view=SubmitPage ssr=SsrMode::Async />
                        <Route path=path!("/plans/:id") view=PlanDetailPage ssr=SsrMode::Async />
                        <Route path=path!("/runs") view=RunsListPage ssr=SsrMode::Async />
                        <Route path=path!("/runs/:id") view=RunDetailPage ssr=SsrMode::Async />
                        <Route path=path!("/schedules") view=SchedulesListPage ssr=SsrMode::Async />
                        <Route path=path!("/schedules/:id") view=ScheduleDetailPage ssr=SsrMode::Async />
                        <Route path=path!("/targets") view=TargetsListPage ssr=SsrMode::Async />
                        <Route path=path!("/replicas") view=ReplicasListPage ssr=SsrMode::Async />
                        <Route path=path!("/deliveries") view=DeliveriesListPage ssr=SsrMode::Async />
                        <Route path=path!("/audit") view=AuditListPage ssr=SsrMode::Async />
                    </Routes>
                </main>
            </div>
        </Router>
    }
}

/// A main navigation link; the current page's is marked for screen
/// readers (`aria-current`, set by the router) and styled from it.
#[component]
fn NavLink(href: &'static str, label: &'static str) -> impl IntoView {
    view! {
        <A
            href=href
            exact=true
            attr:class="text-slate-700 hover:text-slate-950 aria-[current=page]:font-semibold aria-[current=page]:text-blue-800"
        >
            {label}
        </A>
    }
}

#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(App);
}
