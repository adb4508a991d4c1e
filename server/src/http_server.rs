//! The HTTP/1 server in front of the router, with bounds on connections
//! (docs/security.md, "Connections"): `axum::serve` sets no timeout, and
//! a hostile trial held 21,000 silent connections open on one replica,
//! its file descriptors at 19,700 of 20,000.
//!
//! - A connection must send a request's headers within the header timeout
//!   of opening or of its previous response, or it is closed: a silent
//!   connection, a slow-header one (slowloris) and an idle keep-alive one
//!   all end there. A response that streams (the live feed) is not
//!   affected: the timer runs only while a request's head is awaited.
//! - At most `max_connections` are open at once; one more is closed as
//!   soon as it is accepted, and the log says so (once a minute at most).
//! - On shutdown, idle connections close at once and busy ones after
//!   their response, as `axum::serve`'s graceful shutdown did.
//! - With TLS (tls.rs), the handshake must end within the header timeout
//!   too: a client that opens and never says hello holds nothing for long.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower_service::Service;

/// How often a refusal for want of connection slots is logged at most.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(60);

/// The bounds on the server's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a connection may take to send a request's headers, from
    /// its opening or its previous response.
    pub header_timeout: Duration,
    /// The most connections open at once.
    pub max_connections: usize,
}

/// Serves `router` on `listener` until `shutdown`, then waits for the
/// connections to finish; HTTPS when given a `tls` acceptor. Each
/// request carries its peer's address (`ConnectInfo<SocketAddr>`), for
/// the audit log.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut connections = JoinSet::new();
    let mut refused_logged: Option<Instant> = None;
    let mut refused_since_log = 0u64;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.cancelled() => break,
        };
        // Reap what ended, so the set does not grow with every connection.
        while connections.try_join_next().is_some() {}
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, or a connection reset before it
                // was accepted: nothing to do but try again shortly.
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            drop(stream);
            refused_since_log += 1;
            if refused_logged.is_none_or(|at| at.elapsed() >= REFUSAL_LOG_EVERY) {
                tracing::warn!(
                    refused = refused_since_log,
                    limit = limits.max_connections,
                    "connections refused: the limit of open connections is reached \
                     (BATON_MAX_CONNECTIONS)"
                );
                refused_logged = Some(Instant::now());
                refused_since_log = 0;
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let shutdown = shutdown.clone();
        let tls = tls.clone();
        connections.spawn(async move {
            let _slot = slot;
            let Some(tls) = tls else {
                serve_connection(stream, peer, router, limits, shutdown).await;
                return;
            };
            let handshake = tokio::select! {
                done = tokio::time::timeout(limits.header_timeout, tls.accept(stream)) => done,
                _ = shutdown.cancelled() => return,
            };
            match handshake {
                Ok(Ok(stream)) => serve_connection(stream, peer, router, limits, shutdown).await,
                // A scanner, plain HTTP to the HTTPS port, an untrusted
                // certificate on the client's side: the client was told.
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
    while connections.join_next().await.is_some() {}
    Ok(())
}

async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    stream: S,
    peer: SocketAddr,
    router: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) {
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        let mut router = router.clone();
        async move { Ok::<_, Infallible>(router.call(request).await.unwrap_or_else(|e| match e {})) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        _ = shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = ended
        && !e.is_timeout()
        && !e.is_incomplete_message()
    {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}
