//! One watched view's reader: reads it when something may have changed,
//! never more often than the configured interval, and hands every
//! subscriber the same encoded bytes.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use app::components::feed::Feed;
use leptos::prelude::{Owner, provide_context};
use leptos::reactive::computed::ScopedFuture;
use tokio::sync::watch;
use tokio::time::Instant;

use super::shared::{Inner, Snapshot};

pub(super) struct Refresher {
    hub: Arc<Inner>,
    key: String,
    feed: Feed,
    sender: Arc<watch::Sender<Snapshot>>,
    /// Where the page's server function finds the engine, as it does when
    /// a page renders.
    owner: Owner,
}

/// What ended a wait.
enum Wake {
    Read,
    Stop,
}

impl Refresher {
    pub(super) fn new(
        hub: Arc<Inner>,
        key: String,
        feed: Feed,
        sender: Arc<watch::Sender<Snapshot>>,
    ) -> Refresher {
        // A root of its own: the task may run on a thread where a page
        // render left its owner current, and must not hang under it.
        let owner = Owner::new_root(None);
        owner.with(|| provide_context(hub.backend.clone()));
        Refresher {
            hub,
            key,
            feed,
            sender,
            owner,
        }
    }

    /// Reads at once, then after each change signal or idle period, at most
    /// once per interval; ends when the last subscriber leaves or the
    /// replica stops.
    pub(super) async fn run(self) {
        let config = self.hub.config.clone();
        let mut changes = self.hub.signals.changes();
        loop {
            // The read below covers what was signalled until now; a signal
            // raised during it calls for the next one.
            changes.mark_unchanged();
            let read_at = Instant::now();
            self.read_once().await;
            let woke = tokio::select! {
                woke = self.wait_until(read_at + config.idle_refresh) => woke,
                changed = changes.changed() => match changed {
                    Ok(()) => Wake::Read,
                    // The store is gone: only the idle refresh is left.
                    Err(_) => self.wait_until(read_at + config.idle_refresh).await,
                },
            };
            if let Wake::Stop = woke {
                return;
            }
            // However many signals came: one read per interval.
            if let Wake::Stop = self.wait_until(read_at + config.interval).await {
                return;
            }
        }
    }

    /// Reads the view and publishes it if it differs from the last one.
    async fn read_once(&self) {
        let feed = self.feed.clone();
        let read = self.owner.with(|| {
            ScopedFuture::new_untracked(async move { app::pages::live_views::read(&feed).await })
        });
        let json: Arc<str> = read.await.into();
        self.hub.reads.fetch_add(1, Ordering::Relaxed);
        self.sender.send_if_modified(|current| {
            if current.as_deref() == Some(&*json) {
                false
            } else {
                *current = Some(json);
                true
            }
        });
    }

    /// Sleeps until `deadline`; `Stop` if meanwhile the last subscriber
    /// left (and none came back) or the replica is stopping.
    async fn wait_until(&self, deadline: Instant) -> Wake {
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return Wake::Read,
                _ = self.sender.closed() => {
                    if self.hub.retire(&self.key, &self.sender) {
                        return Wake::Stop;
                    }
                    // Someone joined as the last one left: keep serving;
                    // `closed` resolves again only once they leave too.
                }
                _ = self.hub.stopping.cancelled() => {
                    self.hub.forget(&self.key);
                    return Wake::Stop;
                }
            }
        }
    }
}
