//! `http: {url, method, headers, body, expect}` — one request; success when
//! the status is listed in `expect` (any 2xx when the list is empty).

use std::sync::OnceLock;

use super::error_tail::with_body_start;
use super::{Executor, Outcome, RunContext};
use crate::plan::HttpSpec;

/// Shares one connection pool across all HTTP tasks of the replica, built
/// for the first of them: building a client loads the system's CA
/// certificates, tens of milliseconds of CPU that a replica which never
/// runs an HTTP task should not pay when it starts.
#[derive(Default)]
pub struct HttpExecutor {
    client: OnceLock<reqwest::Client>,
}

/// The response body kept in the run's log, at most.
const BODY_LOG_LIMIT: usize = 64 * 1024;

#[async_trait::async_trait]
impl Executor for HttpExecutor {
    async fn execute(&self, spec: &serde_json::Value, ctx: &RunContext) -> Outcome {
        let spec: HttpSpec = match super::spec_of(spec) {
            Ok(s) => s,
            Err(outcome) => return outcome,
        };
        let method = match reqwest::Method::from_bytes(spec.method.as_bytes()) {
            Ok(m) => m,
            Err(_) => {
                return Outcome::failed(None, format!("`{}` is not an HTTP method", spec.method));
            }
        };
        let client = self.client.get_or_init(|| {
            reqwest::Client::builder()
                .redirect(same_origin_redirects())
                .build()
                .expect("an HTTP client with default TLS")
        });
        let mut request = client.request(method.clone(), &spec.url);
        for (name, value) in &spec.headers {
            request = request.header(name, value);
        }
        if let Some(body) = spec.body {
            request = request.body(body);
        }
        // Viewers read run logs: a password in the URL stays out of them.
        let shown = crate::store::redact(&spec.url);
        ctx.log.line("stdout", format!("{method} {shown}"));
        let sent = tokio::select! {
            sent = request.send() => sent,
            _ = ctx.cancel.cancelled() => return Outcome::interrupted(),
        };
        let response = match sent {
            Ok(r) => r,
            Err(e) => {
                let cause = std::error::Error::source(&e)
                    .map(|c| format!(": {c}"))
                    .unwrap_or_default();
                return Outcome::failed(
                    None,
                    format!("request to {shown} failed: {}{cause}", e.without_url()),
                );
            }
        };
        let status = response.status().as_u16();
        ctx.log.line("stdout", format!("HTTP {status}"));
        // Answered: the request happened, and its status decides the run
        // even if a stop comes while the body is read (only the log then
        // misses the body).
        let body = tokio::select! {
            body = body_start(response) => Some(body),
            _ = ctx.cancel.cancelled() => None,
        };
        match &body {
            Some(body) => {
                for line in body.lines() {
                    ctx.log.line("stdout", line);
                }
            }
            None => ctx.log.line(
                "stderr",
                "[baton] stopped before the answer's body was read",
            ),
        }
        let accepted = if spec.expect.is_empty() {
            (200..300).contains(&status)
        } else {
            spec.expect.contains(&status)
        };
        if accepted {
            Outcome::done(Some(status.into()))
        } else {
            Outcome::failed(
                Some(status.into()),
                with_body_start(
                    format!("unexpected HTTP status {status}"),
                    body.as_deref().unwrap_or_default(),
                ),
            )
        }
    }
}

/// Redirects within the task's own scheme, host and port, up to 10. One to
/// another origin is not followed (the task sees the 3xx): reqwest would
/// drop `Authorization` there but send the task's other headers (an
/// `X-Api-Key`) and body to a host the plan never named.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let first = attempt.previous().first().map(|u| u.origin());
        if attempt.previous().len() >= 10 {
            attempt.error("more than 10 redirects")
        } else if first.as_ref() == Some(&attempt.url().origin()) {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}

/// The first [`BODY_LOG_LIMIT`] bytes of the body, read chunk by chunk:
/// a response of gigabytes (or one that never ends) is not held in memory
/// nor waited for past what is kept.
async fn body_start(mut response: reqwest::Response) -> String {
    let mut kept = Vec::new();
    while kept.len() < BODY_LOG_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => kept.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    kept.truncate(BODY_LOG_LIMIT);
    // A character cut at the limit becomes one replacement character.
    String::from_utf8_lossy(&kept).into_owned()
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::http::{HeaderMap, header};
    use axum::response::IntoResponse;
    use axum::routing::get;
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::executor::LogSink;

    /// Serves `app` on a port of its own; its base URL.
    async fn serve(app: axum::Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        base
    }

    async fn run(spec: serde_json::Value) -> (Outcome, Vec<String>) {
        let (log, mut lines) = LogSink::new(1 << 20);
        let ctx = RunContext {
            run_id: 1,
            attempt: 1,
            cancel: CancellationToken::new(),
            heartbeat_timeout: std::time::Duration::from_secs(30),
            log,
        };
        let outcome = HttpExecutor::default().execute(&spec, &ctx).await;
        drop(ctx);
        let mut logged = Vec::new();
        while let Some(line) = lines.recv().await {
            logged.push(line.line);
        }
        (outcome, logged)
    }

    /// The task's headers go only where the plan sends them: a redirect
    /// within the URL's origin is followed, one to another host is not
    /// (the task sees the 3xx), and the log never shows the URL's password.
    #[tokio::test]
    async fn redirects_stay_within_the_origin_and_the_log_hides_the_password() {
        let elsewhere_saw: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = elsewhere_saw.clone();
        let elsewhere = serve(axum::Router::new().route(
            "/steal",
            get(move |headers: HeaderMap| async move {
                let key = headers
                    .get("x-api-key")
                    .map(|v| v.to_str().unwrap().to_owned());
                seen.lock().unwrap().push(key.unwrap_or_default());
                "stolen"
            }),
        ))
        .await;
        let away = format!("{elsewhere}/steal");
        let origin = serve(
            axum::Router::new()
                .route("/ok", get(|| async { "fine" }))
                .route(
                    "/same",
                    get(|| async {
                        (axum::http::StatusCode::FOUND, [(header::LOCATION, "/ok")]).into_response()
                    }),
                )
                .route(
                    "/away",
                    get(move || {
                        let away = away.clone();
                        async move {
                            (axum::http::StatusCode::FOUND, [(header::LOCATION, away)])
                                .into_response()
                        }
                    }),
                ),
        )
        .await;
        let host = origin.trim_start_matches("http://");

        let (outcome, log) = run(
            json!({"kind": "http", "url": format!("http://deploy:s3cret@{host}/same"),
            "headers": {"X-Api-Key": "k-123"}}),
        )
        .await;
        assert!(outcome.success, "{outcome:?}");
        assert_eq!(outcome.result_code, Some(200));
        assert_eq!(log[0], format!("GET http://deploy:***@{host}/same"));
        assert!(log.iter().all(|l| !l.contains("s3cret")), "{log:?}");
        assert!(log.contains(&"fine".to_owned()), "{log:?}");

        let (outcome, _) = run(json!({"kind": "http", "url": format!("{origin}/away"),
            "headers": {"X-Api-Key": "k-123"}}))
        .await;
        assert!(!outcome.success);
        assert_eq!(outcome.result_code, Some(302));
        assert_eq!(outcome.error.as_deref(), Some("unexpected HTTP status 302"));
        assert!(
            elsewhere_saw.lock().unwrap().is_empty(),
            "the other host got the request"
        );
    }
}
