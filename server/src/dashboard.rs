//! The dashboard's HTTP side: server-rendered Leptos pages, the server
//! functions they call, the stylesheet, and the wasm bundle with the static
//! assets beside it.
//!
//! The REST API lives elsewhere; `main` merges the two routers, so this one
//! claims only page routes, the server-function prefix, `/pkg/baton.css`
//! and, as the fallback, files under `site_root`.

use app::{App, backend::Backend, shell};
use axum::{Router, http::header, response::IntoResponse, routing::get};
use leptos::{config::LeptosOptions, prelude::provide_context};
use leptos_axum::{LeptosRoutes, file_and_error_handler_with_context, generate_route_list};

/// Compiled from the Tailwind classes in `app/src` by `build.rs`, so the
/// stylesheet always matches the binary's pages.
const STYLESHEET: &str = include_str!(concat!(env!("OUT_DIR"), "/baton.css"));

/// Serves the dashboard. `options.site_root` must hold what
/// `scripts/build-site.sh` produced (`pkg/baton.js`, `pkg/baton.wasm`, the
/// files of `public/`) for the same build profile as this binary.
pub fn router(options: LeptosOptions, backend: Backend) -> Router {
    let routes = generate_route_list(App);
    let context = move || provide_context(backend.clone());
    let shell_options = options.clone();

    Router::new()
        .route("/pkg/baton.css", get(stylesheet))
        .leptos_routes_with_context(&options, routes, context.clone(), move || {
            shell(shell_options.clone())
        })
        // Anything else is a file of the site root, or the app's 404 page.
        .fallback(file_and_error_handler_with_context(context, shell))
        .with_state(options)
}

async fn stylesheet() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        STYLESHEET,
    )
}
