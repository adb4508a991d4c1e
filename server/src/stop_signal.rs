//! The signals that stop `baton serve` and `baton agent` gracefully.

use tokio_util::sync::CancellationToken;

/// Shuts down gracefully on Ctrl-C, SIGTERM or SIGHUP. SIGHUP is what a
/// closing terminal or ssh session sends a foreground `baton serve`; left
/// to its default it killed the replica on the spot, and its runs failed
/// at the sweep instead of being handed back.
pub async fn stop_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let unix = async {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) {
            (Ok(mut term), Ok(mut hangup)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = hangup.recv() => {}
                }
            }
            _ => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = unix => {}
    }
    tracing::info!("shutting down: no new claims; letting running executions finish");
    shutdown.cancel();
}
