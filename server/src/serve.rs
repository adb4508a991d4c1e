//! `baton serve`: one replica — the scheduler loops plus the API and
//! dashboard — until SIGTERM or SIGINT.

use std::sync::Arc;

use anyhow::Context;
use leptos::config::LeptosOptions;
use tokio_util::sync::CancellationToken;

use axum::routing::post;

use crate::api::{self, ApiState};
use crate::auth::{self, Auth, Users};
use crate::config::Settings;
use crate::dashboard;
use crate::executor::Registry;
use crate::loops::{Replica, SchedulerView, new_replica_id};
use crate::store::{self, ReplicaInfo, Store};
use domain::time::Ts;

pub use crate::version::{VERSION, VERSION_LONG};

pub async fn serve(settings: Settings) -> anyhow::Result<()> {
    // Both before touching the database: a bad users file or an unsafe
    // listen address stops start-up with nothing changed.
    let users = settings.users()?;
    settings.check_listen_is_safe(users.as_ref())?;
    if settings.site_root.is_none() && !settings.bundle.has_bundle() {
        tracing::warn!(
            "this binary carries no dashboard bundle (it was compiled before \
             scripts/build-site.sh built one): pages render but never hydrate, so \
             nothing on them updates live. Build with scripts/run.sh, or point \
             BATON_SITE_ROOT at a bundle"
        );
    }
    // Every other setting, and the port, before the database too: a
    // replica refused after it had registered was listed as dead.
    settings.check()?;
    let scheduler = settings.scheduler();
    scheduler.validate()?;
    settings.live()?;
    let tls = settings.tls()?;
    let notify_targets = settings.notify_targets()?;
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("cannot listen on {}", settings.listen))?;
    let store =
        store::connect_replica(&settings.database.url.0, Some(settings.stale_after)).await?;
    // Before the migrations: a second serve on the file changes nothing.
    let _one_serve = store::sqlite_file(&settings.database.url.0)
        .transpose()?
        .map(store::ServeLock::take)
        .transpose()?;
    store.migrate().await.context("applying migrations")?;
    store.notify_targets_set(notify_targets);
    store.command_policy_set(settings.command_policy());
    let shutdown = CancellationToken::new();
    let info = ReplicaInfo {
        replica_id: new_replica_id(),
        hostname: gethostname::gethostname().to_string_lossy().into_owned(),
        labels: settings.labels(),
        version: VERSION_LONG.to_owned(),
        started_at: Ts::now(),
    };
    let replica = Replica::start(
        store.clone(),
        info.clone(),
        scheduler,
        Registry::builtin().with_commands(settings.command_executor()?),
        shutdown.clone(),
    )
    .await?;
    let app = router(store, info.clone(), replica.view(), &settings, users)?;
    tracing::info!(
        replica = %info.replica_id,
        database = %settings.database.url,
        "baton {VERSION} serving {}://{}",
        if tls.is_some() { "https" } else { "http" },
        listener.local_addr()?
    );
    tokio::spawn(crate::stop_signal::stop_on_signal(shutdown.clone()));
    crate::http_server::serve(
        listener,
        tls,
        app,
        settings.connection_limits(),
        shutdown.clone(),
    )
    .await?;
    // A loop that panicked stopped the replica; say so with the exit code.
    replica.join().await?;
    tracing::info!("stopped");
    Ok(())
}

/// The API and the dashboard on one router, behind the authentication
/// guard; `scheduler` is the replica's own, for `/metrics` and `/readyz`;
/// `users` come
/// from [`Settings::users`] (`None`: open, loopback only).
pub fn router(
    store: Arc<dyn Store>,
    replica: ReplicaInfo,
    scheduler: SchedulerView,
    settings: &Settings,
    users: Option<Users>,
) -> anyhow::Result<axum::Router> {
    let source = Arc::new(dashboard::StoreSource {
        store: store.clone(),
        stale_after: settings.stale_after,
        commands: settings.command_policy(),
    });
    router_over(store, source, replica, scheduler, settings, users)
}

/// [`router`] with the dashboard reading through `source` (`bench --live`
/// counts page reads through one).
pub fn router_over(
    store: Arc<dyn Store>,
    source: Arc<dyn app::backend::DashboardSource>,
    replica: ReplicaInfo,
    scheduler: SchedulerView,
    settings: &Settings,
    users: Option<Users>,
) -> anyhow::Result<axum::Router> {
    let auth = Arc::new(
        Auth::new(
            users,
            store.clone(),
            settings.session_ttl,
            &settings.notify_targets()?.public_url,
        )?
        .trusting(crate::auth::proxies::TrustedProxies::parse(
            &settings.trusted_proxies,
        )?),
    );
    if let Some(path) = settings
        .users_file
        .clone()
        .filter(|p| !p.as_os_str().is_empty())
    {
        tokio::spawn(crate::auth::watch_users_file(
            auth.clone(),
            path,
            scheduler.stopping.clone(),
        ));
    }
    let backend = app::backend::Backend(source);
    let hub = dashboard::live::Hub::new(
        settings.live()?,
        backend.clone(),
        store.signals().clone(),
        scheduler.stopping.clone(),
    );
    let requests = settings.fair_queue()?;
    let state = ApiState {
        requests: requests.clone(),
        live: hub.clone(),
        store: store.clone(),
        replica,
        stale_after: settings.stale_after,
        counters: scheduler.counters,
        health: scheduler.health,
        commands: settings.command_policy(),
        stopping: scheduler.stopping.clone(),
        takes: api::TakeQueue::start(
            store.clone(),
            settings.scheduler().run_heartbeat_timeout(),
            settings.poll_interval,
            scheduler.stopping.clone(),
        ),
        scheduler: Arc::new(settings.scheduler()),
    };
    let bundle = match &settings.site_root {
        Some(dir) => dashboard::Bundle::Directory(dir.clone()),
        None => dashboard::Bundle::Embedded(settings.bundle),
    };
    let options = LeptosOptions::builder()
        .output_name(bundle.output_name())
        .site_root(bundle.site_root())
        .site_pkg_dir("pkg")
        .site_addr(settings.listen)
        .build();
    let sign_in = axum::Router::new()
        .route("/auth/login", post(auth::login))
        .route("/auth/logout", post(auth::logout))
        .with_state(auth.clone());
    let app = api::router(state)
        .merge(dashboard::router(
            options,
            backend,
            hub,
            &bundle,
            Arc::new(error_links(settings)?),
        ))
        .merge(sign_in)
        // Inside the guard and the search shares: it needs the person the
        // guard names, and a search refused by its share takes no turn.
        .layer(axum::middleware::from_fn_with_state(
            requests,
            crate::fair_queue::fair_queue,
        ))
        // Inside the guard: it needs the person the guard names.
        .layer(axum::middleware::from_fn_with_state(
            settings.search_shares()?,
            crate::fair_share::fair_share,
        ))
        .layer(axum::middleware::from_fn_with_state(auth, auth::guard))
        // Pages, JSON and the wasm bundle shrink several times over.
        .layer(tower_http::compression::CompressionLayer::new())
        // Outside the guard: a body is too large whoever sends it.
        .layer(axum::middleware::from_fn(
            crate::body_limit::refuse_large_bodies,
        ));
    // Outside the guard, so its refusals carry the headers too.
    Ok(dashboard::security_headers::protect(app)
        .layer(tower_http::trace::TraceLayer::new_for_http()))
}

/// The key for errors in the dashboard's links, from the users file every
/// replica shares (random without one).
fn error_links(settings: &Settings) -> anyhow::Result<dashboard::error_links::ErrorLinks> {
    let users = match settings.users_file.as_deref() {
        Some(path) if !path.as_os_str().is_empty() => {
            Some(std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?)
        }
        _ => None,
    };
    dashboard::error_links::ErrorLinks::new(users.as_deref())
}
