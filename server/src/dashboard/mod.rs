//! The dashboard's HTTP side: server-rendered Leptos pages, the server
//! functions they call, the stylesheet, and the wasm bundle with the static
//! assets beside it.
//!
//! The REST API lives elsewhere; `main` merges the two routers, so this one
//! claims only page routes, the server-function prefix, the live feed
//! (`/live/`), the stylesheet and the bundle's files: from inside the
//! binary, or from `BATON_SITE_ROOT`.

pub mod assets;
mod contrast;
pub mod error_links;
pub mod live;
pub mod security_headers;
mod server_fn_status;
mod source;

use std::path::PathBuf;
use std::sync::LazyLock;

use app::{App, backend::Backend, shell};
use axum::{Router, http::header, response::IntoResponse, routing::get};
use leptos::{config::LeptosOptions, prelude::provide_context};
use leptos_axum::{
    LeptosRoutes, file_and_error_handler_with_context, generate_route_list,
    render_app_async_with_context,
};

pub use self::source::StoreSource;

/// Compiled from the Tailwind classes in `app/src` by `build.rs`, so the
/// stylesheet always matches the binary's pages.
const STYLESHEET: &str = include_str!(concat!(env!("OUT_DIR"), "/baton.css"));

/// The stylesheet's address carries a hash of its content, so browsers
/// may keep it forever and still never use a stale one after an upgrade.
static STYLESHEET_HREF: LazyLock<String> =
    LazyLock::new(|| format!("/pkg/baton-{:016x}.css", fnv1a(STYLESHEET.as_bytes())));

/// Where the pages' wasm bundle, JS glue and `public/` files come from.
pub enum Bundle {
    /// Compiled into the binary (the default).
    Embedded(&'static assets::Site),
    /// What `scripts/build-site.sh` produced (`pkg/baton.js`,
    /// `pkg/baton.wasm`, the files of `public/`), for the same build profile
    /// as this binary: `BATON_SITE_ROOT`, for development.
    Directory(PathBuf),
}

impl Bundle {
    /// The JS and wasm file stem the pages ask for.
    pub fn output_name(&self) -> &'static str {
        match self {
            Bundle::Embedded(site) => site.output_name,
            Bundle::Directory(_) => "baton",
        }
    }

    /// Leptos's site root. An embedded bundle reads no directory; the
    /// value is then only a name in the options.
    pub fn site_root(&self) -> String {
        match self {
            Bundle::Embedded(_) => "(embedded)".to_owned(),
            Bundle::Directory(dir) => dir.to_string_lossy().into_owned(),
        }
    }
}

/// Serves the dashboard, its files taken from `bundle`, and the live feed
/// of `hub` (which reads through the same `backend`).
pub fn router(
    options: LeptosOptions,
    backend: Backend,
    hub: live::Hub,
    bundle: &Bundle,
    links: std::sync::Arc<error_links::ErrorLinks>,
) -> Router {
    let routes = generate_route_list(App);
    let context = move || provide_context(backend.clone());
    let page = |options: LeptosOptions| {
        security_headers::set_page_policy();
        shell(options, STYLESHEET_HREF.as_str())
    };

    let feed = Router::new()
        .route("/live/{*view}", get(live::follow))
        .with_state(hub);
    let mut router = Router::new()
        .merge(feed)
        .route(STYLESHEET_HREF.as_str(), get(stylesheet))
        .leptos_routes_with_context(&options, routes, context.clone(), {
            let options = options.clone();
            move || page(options.clone())
        });
    router = match bundle {
        // Anything else is a file of the site root, or the app's 404 page.
        Bundle::Directory(_) => router.fallback(file_and_error_handler_with_context(context, page)),
        Bundle::Embedded(site) => {
            for asset in site.assets {
                router = router.route(
                    asset.path,
                    get(move |headers: axum::http::HeaderMap| async move {
                        assets::respond(asset, &headers)
                    }),
                );
            }
            // Anything else is the app's 404 page; no path reaches a disk.
            let options = options.clone();
            router.fallback(render_app_async_with_context(context, move || {
                page(options.clone())
            }))
        }
    };
    router
        .route_layer(axum::middleware::from_fn(
            server_fn_status::server_fn_status,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(
            crate::plan::limits::MAX_PLAN_BODY_BYTES,
        ))
        .with_state(options)
        .layer(axum::middleware::from_fn_with_state(
            links,
            error_links::error_links,
        ))
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
