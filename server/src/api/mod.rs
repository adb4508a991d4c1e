//! The REST API under `/api/v1` (described by `/api/v1/openapi.json`),
//! plus `/healthz`, `/readyz` and `/metrics`.
//!
//! Handlers are thin: parse and check input, call one store method, return
//! a view from `domain::model`. Errors go through [`error::ApiError`].

mod audit;
mod deliveries;
mod error;
mod health;
mod json_body;
mod json_errors;
mod keyset;
mod metrics;
mod openapi;
mod operator;
mod plans;
mod plans_bulk;
mod replicas;
mod runs;
mod schedules;
mod strict_query;
mod take_queue;
mod targets;
mod tasks;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

pub use self::error::{ApiError, ApiResult};
pub use self::take_queue::TakeQueue;
use crate::loops::{LoopHealth, RunCounters, SchedulerConfig};
use crate::plan::CommandPolicy;
use crate::store::{ReplicaInfo, Store};
use domain::model::Identity;
use domain::model::PlanView;
use domain::time::Ts;
use domain::views::Action;

/// What every handler may use.
#[derive(Clone)]
pub struct ApiState {
    pub store: Arc<dyn Store>,
    /// This process, for `/api/v1/replicas`.
    pub replica: ReplicaInfo,
    /// A replica whose heartbeat is older than this is not alive.
    pub stale_after: Duration,
    /// This process's scheduler counters, for `/metrics`.
    pub counters: Arc<RunCounters>,
    /// This process's loops, for `/readyz`.
    pub health: Arc<LoopHealth>,
    /// Which commands plans may run on this server.
    pub commands: CommandPolicy,
    /// The dashboard's live feed, for `/metrics`.
    pub live: crate::dashboard::live::Hub,
    /// Fires when the replica starts shutting down (`/readyz` says so).
    pub stopping: tokio_util::sync::CancellationToken,
    /// The request slots, for `/metrics`.
    pub requests: crate::fair_queue::FairQueue,
    /// The replica's timings, which agents keep too (the worker protocol).
    /// Shared: the state is cloned for every request.
    pub scheduler: Arc<SchedulerConfig>,
    /// Agents' takes waiting for runs.
    pub takes: TakeQueue,
}

/// An operator action answered with the plan as it now stands.
async fn act(
    state: &ApiState,
    who: &Identity,
    action: Action,
    id: &str,
) -> ApiResult<axum::Json<PlanView>> {
    let id = error::parse_id(id, crate::actions::subject(action))?;
    let plan_id = crate::actions::act(&*state.store, action, id, who.into(), Ts::now()).await?;
    Ok(axum::Json(state.store.plan_get(plan_id).await?))
}

/// A file in a request body: YAML text when the Content-Type says so
/// (`None`), else JSON bytes for the caller's JSON parser.
fn yaml_body<'a>(headers: &axum::http::HeaderMap, body: &'a [u8]) -> ApiResult<Option<&'a str>> {
    let yaml = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.contains("yaml"));
    if !yaml {
        return Ok(None);
    }
    std::str::from_utf8(body)
        .map(Some)
        .map_err(|_| ApiError::Invalid {
            message: "the body is not UTF-8 text".into(),
            field: None,
        })
}

pub fn router(state: ApiState) -> Router {
    // Routes that read a query string check it themselves (StrictQuery).
    let queried = Router::new()
        .route("/plans", post(plans::submit).get(plans::list))
        .route(
            "/plans/bulk",
            get(plans_bulk::counts).post(plans_bulk::bulk),
        )
        .route("/plans/{id}/export", get(plans::export))
        .route("/runs", get(runs::search))
        .route("/runs/bulk", get(runs::bulk_counts).post(runs::bulk))
        .route("/deliveries", get(deliveries::list))
        .route("/audit", get(audit::list));
    let plain = Router::new()
        .route("/plans/{id}", get(plans::get))
        .route("/plans/{id}/definition", get(plans::definition))
        .route("/plans/{id}/run", post(plans::run))
        .route("/plans/{id}/retry", post(plans::retry))
        .route("/plans/{id}/cancel", post(plans::cancel))
        .route("/plans/{id}/approve", post(plans::approve))
        .route("/plans/{id}/pause", post(plans::pause))
        .route("/plans/{id}/resume", post(plans::resume))
        .route("/tasks/{id}/retry", post(tasks::retry))
        .route("/tasks/{id}/cancel", post(tasks::cancel))
        .route("/tasks/{id}/skip", post(tasks::skip))
        .route("/tasks/{id}/approve", post(tasks::approve))
        .route("/targets", get(targets::list))
        .route("/paused", get(targets::paused))
        .route("/targets/pause", post(targets::pause))
        .route("/targets/resume", post(targets::resume))
        .route("/targets/capacity", post(targets::capacity))
        .route("/schedules", post(schedules::create).get(schedules::list))
        .route(
            "/schedules/{id}",
            get(schedules::get)
                .put(schedules::update)
                .delete(schedules::delete),
        )
        .route("/schedules/{id}/pause", post(schedules::pause))
        .route("/schedules/{id}/resume", post(schedules::resume))
        .route("/schedules/{id}/trigger", post(schedules::trigger))
        .route("/runs/{id}", get(runs::get))
        .route("/runs/{id}/log", get(runs::log))
        .route("/replicas", get(replicas::list))
        .route("/replicas/{id}/drain", post(replicas::drain))
        .route("/replicas/{id}/resume", post(replicas::resume))
        .route("/worker/hello", post(worker::hello))
        .route("/worker/beat", post(worker::beat))
        .route("/worker/take", post(worker::take))
        .route("/worker/runs/beat", post(worker::beat_runs))
        .route("/worker/runs/log", post(worker::log))
        .route("/worker/finish", post(worker::finish))
        .route("/worker/hand-back", post(worker::hand_back))
        .route("/worker/bye", post(worker::bye))
        .route("/openapi.json", get(openapi::openapi))
        .route_layer(axum::middleware::from_fn(strict_query::no_query));
    let api = queried
        .merge(plain)
        .fallback(|| async { ApiError::NotFound("no such API endpoint".into()) });
    Router::new()
        .nest("/api/v1", api)
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(metrics::metrics))
        .layer(DefaultBodyLimit::max(
            crate::plan::limits::MAX_PLAN_BODY_BYTES,
        ))
        .layer(axum::middleware::from_fn(json_errors::json_errors))
        .with_state(state)
}
