//! A local webhook receiver that records every POST it is sent, for the
//! notification tests (docs/design.md, "Notifications"): which delivery
//! key, event, signature and body each attempt carried.

use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};

/// One POST the receiver saw.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub delivery: String,
    pub event: String,
    pub signature: String,
    pub body: String,
}

/// A webhook receiver: `/hook` answers 200; `/flaky` answers 500 to its
/// first two requests, then 200; `/sometimes` answers 503 to every
/// fourth request (retries under load).
#[derive(Clone, Default)]
pub struct Receiver {
    seen: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    pub async fn start() -> (Receiver, String) {
        let receiver = Receiver::default();
        let app = axum::Router::new()
            .route("/{path}", axum::routing::post(record))
            .with_state(receiver.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (receiver, base)
    }

    pub fn seen(&self, path: &str) -> Vec<Received> {
        let seen = self.seen.lock().unwrap();
        seen.iter().filter(|r| r.path == path).cloned().collect()
    }

    pub fn events(&self, path: &str, event: &str) -> Vec<Received> {
        self.seen(path)
            .into_iter()
            .filter(|r| r.event == event)
            .collect()
    }
}

async fn record(
    State(receiver): State<Receiver>,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: String,
) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let mut seen = receiver.seen.lock().unwrap();
    let earlier = seen.iter().filter(|r| r.path == path).count();
    seen.push(Received {
        path: path.clone(),
        delivery: header("x-baton-delivery"),
        event: header("x-baton-event"),
        signature: header("x-baton-signature"),
        body,
    });
    if path == "flaky" && earlier < 2 {
        StatusCode::INTERNAL_SERVER_ERROR
    } else if path == "sometimes" && earlier % 4 == 3 {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}
