//! Every error the API answers is JSON (`{"error": ...}`), including the
//! ones axum writes itself as plain text before a handler runs: a body
//! over the size limit (413), a query string that does not parse (400), a
//! wrong method (405), an unsupported content type (415). Scripts parse
//! one format, whatever went wrong.

use axum::Json;
use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use domain::model::ErrorBody;

use crate::plan::limits::body_too_large;

/// Plain-text refusals are short; this bounds what is read of one.
const MAX_TEXT_BYTES: usize = 16 * 1024;

pub async fn json_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = to_bytes(body, MAX_TEXT_BYTES)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let error = match status {
        StatusCode::PAYLOAD_TOO_LARGE => body_too_large(),
        _ if text.is_empty() => status
            .canonical_reason()
            .unwrap_or("request refused")
            .to_owned(),
        _ => text,
    };
    let json = Json(ErrorBody { error, field: None }).into_response();
    // Keep what the refusal said besides its body (Allow, Retry-After,
    // WWW-Authenticate), but describe the new body.
    parts.headers.remove(header::CONTENT_LENGTH);
    let (json_parts, json_body) = json.into_parts();
    parts.headers.extend(json_parts.headers);
    Response::from_parts(parts, Body::new(json_body))
}
