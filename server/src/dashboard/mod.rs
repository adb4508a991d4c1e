//! The dashboard's HTTP side: server-rendered Leptos pages, the server
//! functions they call, the stylesheet, and the wasm bundle with the static
//! assets beside it.
//!
//! The REST API lives elsewhere; `main` merges the two routers, so this one
//! claims only page routes, the server-function prefix, the stylesheet
//! and, as the fallback, files under `site_root`.

mod contrast;
pub mod security_headers;
mod server_fn_status;
mod source;

use std::sync::LazyLock;

use app::{App, backend::Backend, shell};
use axum::{Router, http::header, response::IntoResponse, routing::get};
use leptos::{config::LeptosOptions, prelude::provide_context};
use leptos_axum::{LeptosRoutes, file_and_error_handler_with_context, generate_route_list};

pub use self::source::StoreSource;

/// Compiled from the Tailwind classes in `app/src` by `build.rs`, so the
/// stylesheet always matches the binary's pages.
const STYLESHEET: &str = include_str!(concat!(env!("OUT_DIR"), "/baton.css"));

/// The stylesheet's address carries a hash of its content, so browsers
/// may keep it forever and still never use a stale one after an upgrade.
static STYLESHEET_HREF: LazyLock<String> =
    LazyLock::new(|| format!("/pkg/baton-{:016x}.css", fnv1a(STYLESHEET.as_bytes())));

/// Serves the dashboard. `options.site_root` must hold what
/// `scripts/build-site.sh` produced (`pkg/baton.js`, `pkg/baton.wasm`, the
/// files of `public/`) for the same build profile as this binary.
pub fn router(options: LeptosOptions, backend: Backend) -> Router {
    let routes = generate_route_list(App);
    let context = move || provide_context(backend.clone());
    let page = |options: LeptosOptions| {
        security_headers::set_page_policy();
        shell(options, STYLESHEET_HREF.as_str())
    };

    Router::new()
        .route(STYLESHEET_HREF.as_str(), get(stylesheet))
        .leptos_routes_with_context(&options, routes, context.clone(), {
            let options = options.clone();
            move || page(options.clone())
        })
        // Anything else is a file of the site root, or the app's 404 page.
        .fallback(file_and_error_handler_with_context(context, page))
        .route_layer(axum::middleware::from_fn(
            server_fn_status::server_fn_status,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(
            crate::plan::limits::MAX_PLAN_BODY_BYTES,
        ))
        .with_state(options)
}

async fn stylesheet() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
        ],
        STYLESHEET,
    )
}

/// 64-bit FNV-1a: a stable content hash for cache busting (not security).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
