//! Probes for load balancers and orchestrators.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{ApiError, ApiState};

/// The process is up and serving.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The database answers, every migration is applied and every scheduler
/// loop of this replica completed a round within its interval. A stalled
/// loop answers 503 naming it, its last error and how long it has been
/// stuck: a replica that serves pages but schedules nothing is not ready.
pub async fn readyz(State(state): State<ApiState>) -> Response {
    if let Err(e) = state.store.ready().await {
        return ApiError::Unavailable(e.to_string()).into_response();
    }
    let stalled = state.health.stalled();
    if stalled.is_empty() {
        return Json(json!({"status": "ready"})).into_response();
    }
    let names: Vec<_> = stalled.iter().map(|s| s.name).collect();
    let body = json!({
        "status": "stalled",
        "error": format!("scheduler loops not completing rounds: {}", names.join(", ")),
        "stalled": stalled,
    });
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}
