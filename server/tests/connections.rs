//! The bounds on a replica's HTTP connections (docs/security.md,
//! "Connections"), against a real `baton serve`: silent, slow-header and
//! idle keep-alive connections are closed after the header timeout, a
//! live feed is not, and past the connection limit a new connection is
//! closed at once, until slots free. A hostile trial held 21,000 silent
//! connections open on one replica.

mod common;

use std::time::{Duration, Instant};

use common::process::{Baton, Options};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HEADER_TIMEOUT: Duration = Duration::from_secs(1);
const LIMIT: usize = 24;

async fn baton() -> (tempfile::TempDir, Baton) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("baton.db").display());
    let options = Options::default()
        .env("BATON_HTTP_HEADER_TIMEOUT", "1s")
        .env("BATON_MAX_CONNECTIONS", &LIMIT.to_string());
    let baton = Baton::start(&url, &options).await;
    (dir, baton)
}

async fn connect(baton: &Baton) -> TcpStream {
    TcpStream::connect(baton.base.trim_start_matches("http://"))
        .await
        .unwrap()
}

/// How long until the server closes `stream` (reading and discarding
/// what it sends), or `None` if it is still open after `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        let left = within.checked_sub(started.elapsed())?;
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn silent_slow_and_idle_connections_close_after_the_header_timeout() {
    let (_dir, baton) = baton().await;
    let bound = HEADER_TIMEOUT + Duration::from_secs(2);

    let mut silent = connect(&baton).await;
    let took = closed_within(&mut silent, bound).await;
    assert!(
        took.is_some_and(|t| t >= HEADER_TIMEOUT / 2),
        "silent: {took:?}"
    );

    // A header line every 300 ms: never finished, closed all the same.
    let mut slow = connect(&baton).await;
    let host = baton.base.trim_start_matches("http://");
    slow.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\n").as_bytes())
        .await
        .unwrap();
    let started = Instant::now();
    let mut closed = false;
    while started.elapsed() < bound {
        tokio::time::sleep(Duration::from_millis(300)).await;
        if slow.write_all(b"X-Slow: 1\r\n").await.is_err() {
            closed = true;
            break;
        }
    }
    assert!(
        closed
            || closed_within(&mut slow, Duration::from_millis(100))
                .await
                .is_some(),
        "a slow-header connection was still open after {:?}",
        started.elapsed()
    );

    // Answered, then idle: closed once the next request's head is late.
    let mut idle = connect(&baton).await;
    idle.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut answer = [0u8; 512];
    let n = idle.read(&mut answer).await.unwrap();
    let text = String::from_utf8_lossy(&answer[..n]);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        closed_within(&mut idle, bound).await.is_some(),
        "idle keep-alive stayed open"
    );

    // A live feed streams past the timeout.
    let mut feed = connect(&baton).await;
    feed.write_all(format!("GET /live/overview HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    assert_eq!(
        closed_within(&mut feed, HEADER_TIMEOUT * 3).await,
        None,
        "the live feed was cut"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn past_the_limit_a_connection_closes_at_once_until_slots_free() {
    let (_dir, baton) = baton().await;
    let mut held = Vec::new();
    for _ in 0..LIMIT {
        held.push(connect(&baton).await);
    }
    // Let the server accept them all.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut extra = connect(&baton).await;
    let took = closed_within(&mut extra, Duration::from_millis(800)).await;
    assert!(took.is_some(), "a connection past the limit stayed open");
    // The silent ones time out and free their slots: served again.
    tokio::time::sleep(HEADER_TIMEOUT + Duration::from_millis(500)).await;
    let (status, body) = baton.get_json("/healthz").await;
    assert_eq!(status, 200, "{body}");
    drop(held);
}
