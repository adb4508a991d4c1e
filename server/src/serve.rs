//! `baton serve`: one replica — the scheduler loops plus the API and
//! dashboard — until SIGTERM or SIGINT.

use std::sync::Arc;

use anyhow::Context;
use leptos::config::LeptosOptions;
use tokio_util::sync::CancellationToken;

use crate::api::{self, ApiState};
use crate::config::Settings;
use crate::dashboard;
use crate::executor::Registry;
use crate::scheduler::{Replica, RunCounters, new_replica_id};
use crate::store::{self, ReplicaInfo, Store, Ts};

/// The version every replica reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub async fn serve(settings: Settings) -> anyhow::Result<()> {
    let store = store::connect(&settings.database_url.0).await?;
    store.migrate().await.context("applying migrations")?;
    store.notify_targets_set(settings.notify_targets()?);
    let shutdown = CancellationToken::new();
    let info = ReplicaInfo {
        replica_id: new_replica_id(),
        hostname: gethostname::gethostname().to_string_lossy().into_owned(),
        labels: settings.labels(),
        version: VERSION.to_owned(),
        started_at: Ts::now(),
    };
    let replica = Replica::start(
        store.clone(),
        info.clone(),
        settings.scheduler(),
        Registry::builtin(),
        shutdown.clone(),
    )
    .await?;
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("cannot listen on {}", settings.listen))?;
    let app = router(store, info.clone(), replica.worker.counters(), &settings);
    tracing::info!(
        replica = %info.replica_id,
        database = %settings.database_url,
        "baton {VERSION} serving http://{}",
        listener.local_addr()?
    );
    tokio::spawn(stop_on_signal(shutdown.clone()));
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.clone().cancelled_owned())
        .await?;
    replica.join().await;
    tracing::info!("stopped");
    Ok(())
}

/// The API and the dashboard on one router; `counters` are the replica's
/// own, for `/metrics`.
pub fn router(
    store: Arc<dyn Store>,
    replica: ReplicaInfo,
    counters: Arc<RunCounters>,
    settings: &Settings,
) -> axum::Router {
    let state = ApiState {
        store: store.clone(),
        replica,
        stale_after: settings.stale_after,
        counters,
    };
    let options = LeptosOptions::builder()
        .output_name("baton")
        .site_root(settings.site_root.to_string_lossy().into_owned())
        .site_pkg_dir("pkg")
        .site_addr(settings.listen)
        .build();
    let backend = app::backend::Backend(Arc::new(dashboard::StoreSource {
        store,
        stale_after: settings.stale_after,
    }));
    api::router(state)
        .merge(dashboard::router(options, backend))
        // Pages, JSON and the wasm bundle shrink several times over.
        .layer(tower_http::compression::CompressionLayer::new())
        .layer(tower_http::trace::TraceLayer::new_for_http())
}

async fn stop_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
    tracing::info!("shutting down: no new claims; letting running executions finish");
    shutdown.cancel();
}
