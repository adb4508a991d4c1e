//! Probes for load balancers and orchestrators.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{ApiError, ApiState};
use crate::store::clock;

/// How long a probe waits for the database. The pool waits 10 s for a
/// connection, and a load balancer's or Prometheus' own timeout (often
/// 10 s) ran out first while the database was down: the scrape failed
/// instead of reading `baton_database_up 0`.
pub const PROBE_WAIT: Duration = Duration::from_secs(3);

/// The process is up and serving.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The database answers, every migration is applied and every scheduler
/// loop of this replica completed a round within its interval; a host
/// clock off from the database's is named under `clock`. A stalled
/// loop answers 503 naming it, its last error and how long it has been
/// stuck: a replica that serves pages but schedules nothing is not ready.
pub async fn readyz(State(state): State<ApiState>) -> Response {
    match tokio::time::timeout(PROBE_WAIT, state.store.ready()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return ApiError::Unavailable(e.to_string()).into_response(),
        Err(_) => {
            return ApiError::Unavailable(format!(
                "the database did not answer within {} s",
                PROBE_WAIT.as_secs()
            ))
            .into_response();
        }
    }
    let stalled = state.health.stalled();
    if stalled.is_empty() {
        let mut body = json!({"status": "ready"});
        if let Some(note) = clock_note() {
            body["clock"] = note.into();
        }
        return Json(body).into_response();
    }
    let names: Vec<_> = stalled.iter().map(|s| s.name).collect();
    let mut body = json!({
        "status": "stalled",
        "error": format!("scheduler loops not completing rounds: {}", names.join(", ")),
        "stalled": stalled,
    });
    if let Some(note) = clock_note() {
        body["clock"] = note.into();
    }
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

/// What `/readyz` says of a host clock off from the database's. It stays
/// ready: every lease, heartbeat and deadline is judged on the database's
/// clock (docs/design.md, "One clock"), so the replica schedules correctly;
/// the note is for the operator, whose commands on this host see its clock.
fn clock_note() -> Option<String> {
    let skew = clock::skew();
    clock::skew_is_notable(skew).then(|| {
        format!(
            "this host's clock is {} the database's; Baton keeps to the database's clock",
            app::model::describe_clock_skew(skew.num_milliseconds())
        )
    })
}
