//! Probes for load balancers and orchestrators.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::{ApiError, ApiResult, ApiState};

/// The process is up and serving.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The database answers and every migration is applied.
pub async fn readyz(State(state): State<ApiState>) -> ApiResult<Json<Value>> {
    state
        .store
        .ready()
        .await
        .map_err(|e| ApiError::Unavailable(e.to_string()))?;
    Ok(Json(json!({"status": "ready"})))
}
