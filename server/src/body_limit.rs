//! Bodies over the limit are refused so the client hears why, in the form
//! it reads (`refusal.rs`: the dashboard's own error for its calls). A request
//! that declares more than `MAX_PLAN_BODY_BYTES` is answered `413` at
//! once, before anything reads it, and the rest of its body is then read
//! and thrown away beside the answer: a server that answers and closes
//! the connection while the client is still sending leaves most clients
//! with "broken pipe" instead of the answer (`auth.rs`
//! `a_crowd_that_leaves_mid_request_loses_no_slot` saw it from reqwest
//! several times a second). What is drained is bounded in bytes and in
//! time; a body declared past the bound is not read at all, and its
//! answer says `Connection: close`.

use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;

use crate::plan::limits::{MAX_PLAN_BODY_BYTES, body_too_large};
use crate::refusal::Audience;

/// The most of a refused body that is read to let its client finish.
const DRAIN_BYTES: u64 = 4 * MAX_PLAN_BODY_BYTES as u64;

/// How long a refused body is read at most.
const DRAIN_TIME: Duration = Duration::from_secs(10);

/// The layer, outside the sign-in guard: a body is too large whoever sends
/// it, and nothing past this point should read one.
pub async fn refuse_large_bodies(request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(length) if length > MAX_PLAN_BODY_BYTES as u64 => refuse(request, length),
        _ => next.run(request).await,
    }
}

fn refuse(request: Request, length: u64) -> Response {
    let mut refused =
        Audience::of(&request).refuse(StatusCode::PAYLOAD_TOO_LARGE, body_too_large());
    if length <= DRAIN_BYTES {
        // The answer goes out now; the body is read on beside it, so the
        // connection stays open for the client to finish sending.
        tokio::spawn(tokio::time::timeout(DRAIN_TIME, drain(request)));
    } else {
        // Too much to read for nothing: this connection cannot carry
        // another request.
        refused
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    refused
}

/// Reads the body to its end (or to the client's going), keeping none of it.
async fn drain(request: Request) {
    let mut stream = request.into_body().into_data_stream();
    while let Some(Ok(_)) = stream.next().await {}
}
