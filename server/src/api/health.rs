//! Probes for load balancers and orchestrators.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{ApiError, ApiState};
use domain::time::Ts;
use domain::time::clock;

/// How long a probe waits for the database. The pool waits 10 s for a
/// connection, and a load balancer's or Prometheus' own timeout (often
/// 10 s) ran out first while the database was down: the scrape failed
/// instead of reading `baton_database_up 0`.
pub const PROBE_WAIT: Duration = Duration::from_secs(3);

/// How long `/readyz` waits for the database to take its write. A locked
/// table, or a pool whose every connection waits on one, held it past a
/// load balancer's 2 s timeout on every replica; it answers within a
/// second now, and says why.
pub const READY_WAIT: Duration = Duration::from_millis(900);

/// The process is up and serving.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The database takes a write (this replica's heartbeat), every migration
/// is applied and every scheduler loop of this replica completed a round
/// within its interval; a host clock off from the database's is named
/// under `clock`. Not ready, with the reason: while shutting down, from
/// the first write the database refuses (a full disk, a killed
/// connection) until one succeeds, when the write takes longer than
/// [`READY_WAIT`] (a lock held), and with a stalled loop, named with its
/// last error and how long it has been stuck: a replica that serves pages
/// but schedules nothing is not ready.
pub async fn readyz(State(state): State<ApiState>) -> Response {
    if state.stopping.is_cancelled() {
        return ApiError::Unavailable("shutting down: this replica takes no new work".into())
            .into_response();
    }
    let write = async {
        state.store.ready().await?;
        state.store.replica_upsert(&state.replica, Ts::now()).await
    };
    match tokio::time::timeout(READY_WAIT, write).await {
        Ok(Ok(_draining)) => {}
        Ok(Err(e)) => {
            return ApiError::Unavailable(format!("the database refused a write: {e}"))
                .into_response();
        }
        Err(_) => {
            return ApiError::Unavailable(format!(
                "the database did not take a write within {} ms (a lock held, \
                 overload, or unreachable)",
                READY_WAIT.as_millis()
            ))
            .into_response();
        }
    }
    let stalled = state.health.stalled();
    let (status, mut body) = if stalled.is_empty() {
        (StatusCode::OK, json!({"status": "ready"}))
    } else {
        let names: Vec<_> = stalled.iter().map(|s| s.name).collect();
        let body = json!({
            "status": "stalled",
            "error": format!("scheduler loops not completing rounds: {}", names.join(", ")),
            "stalled": stalled,
        });
        (StatusCode::SERVICE_UNAVAILABLE, body)
    };
    if let Some(note) = clock_note() {
        body["clock"] = note.into();
    }
    (status, Json(body)).into_response()
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
            domain::model::describe_clock_skew(skew.num_milliseconds())
        )
    })
}
