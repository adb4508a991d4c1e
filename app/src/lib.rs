//! Baton's dashboard, rendered on the server and hydrated in the browser.
//!
//! Layout:
//! - [`model`]: the JSON view types shared with the REST API.
//! - `backend` (ssr only): the trait through which server functions reach
//!   the engine; the server crate implements it and provides it as context.
//! - [`pages`]: one module per page, each with the server functions it calls.
//! - [`components`]: pieces shared by pages (status badges, live refresh).
//! - [`shell`] and [`App`]: the HTML document and the router; `hydrate` is
//!   the wasm entry point the page's hydration script calls.

// Leptos views are deeply nested types; without `--cfg erase_components`
// (release builds) computing their layout exceeds the default limit.
#![recursion_limit = "256"]

pub mod model;

#[cfg(feature = "ssr")]
pub mod backend;

pub mod components;
pub mod pages;

use leptos::prelude::*;
use leptos_meta::{MetaTags, Title, provide_meta_context};
use leptos_router::{
    StaticSegment,
    components::{Route, Router, Routes},
};

use crate::pages::plans::PlansPage;

/// The whole HTML document; only ever rendered on the server.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <link rel="icon" type="image/svg+xml" href="/favicon.svg" />
                <link rel="stylesheet" href="/pkg/baton.css" />
                <AutoReload options=options.clone() />
                <HydrationScripts options />
                <MetaTags />
            </head>
            <body class="bg-slate-50 text-slate-900 antialiased">
                <App />
            </body>
        </html>
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();

    // Effects never run on the server, so this attribute appears only once
    // the wasm bundle has taken over the page: browser tests wait for it.
    let root = NodeRef::<leptos::html::Div>::new();
    Effect::new(move |_| {
        if let Some(el) = root.get() {
            let _ = el.set_attribute("data-hydrated", "true");
        }
    });

    view! {
        <Title text="Baton" />
        <div node_ref=root id="baton" class="min-h-screen">
            <header class="border-b border-slate-200 bg-white">
                <div class="mx-auto flex max-w-6xl items-center gap-3 px-4 py-3">
                    <a href="/" class="text-lg font-semibold tracking-tight">
                        "Baton"
                    </a>
                    <span class="text-sm text-slate-500">"task scheduler"</span>
                </div>
            </header>
            <main class="mx-auto max-w-6xl px-4 py-6">
                <Router>
                    <Routes fallback=|| view! { <p class="text-slate-600">"Page not found."</p> }>
                        <Route path=StaticSegment("") view=PlansPage />
                    </Routes>
                </Router>
            </main>
        </div>
    }
}

#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(App);
}
