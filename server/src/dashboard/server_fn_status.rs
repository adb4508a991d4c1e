//! Gives the dashboard's server functions the HTTP status their error
//! means. Leptos answers every server-function error with 500, so a
//! viewer's forbidden action, an invalid plan and a missing run all looked
//! like server faults to proxies, logs and alerting. The error body (a
//! [`DashboardError`] in JSON) is kept as it is: the page decodes any 4xx
//! or 5xx the same way.

use app::error::DashboardError;
use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Error bodies are small; one larger than this is passed on untouched.
const MAX_ERROR_BYTES: usize = 64 * 1024;

pub async fn server_fn_status(request: Request, next: Next) -> Response {
    // A body declared past the limit never gets here: `body_limit` refuses
    // it before anything reads it, in the dashboard's error.
    if !request.uri().path().starts_with("/_fn/") {
        return next.run(request).await;
    }
    let response = next.run(request).await;
    if response.status() != StatusCode::INTERNAL_SERVER_ERROR {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = to_bytes(body, MAX_ERROR_BYTES).await else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "error body too large").into_response();
    };
    if let Ok(error) = serde_json::from_slice::<DashboardError>(&bytes) {
        parts.status = status_of(&error);
    }
    Response::from_parts(parts, Body::from(bytes))
}

fn status_of(error: &DashboardError) -> StatusCode {
    match error {
        DashboardError::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        DashboardError::NotFound(_) => StatusCode::NOT_FOUND,
        DashboardError::Conflict(_) => StatusCode::CONFLICT,
        DashboardError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        DashboardError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
        DashboardError::Forbidden(_) => StatusCode::FORBIDDEN,
        // The request could not be decoded: the sender's fault, unless the
        // body hit the size limit while being read.
        DashboardError::Transport(message) if message.contains("length limit") => {
            StatusCode::PAYLOAD_TOO_LARGE
        }
        DashboardError::Transport(_) => StatusCode::BAD_REQUEST,
    }
}
