//! One replica's live views: who watches which, and the one refresher per
//! watched view.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use app::backend::Backend;
use app::components::feed::Feed;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::LiveConfig;
use super::refresher::Refresher;
use super::shared::{Inner, Snapshot};
use crate::store::Signals;

/// A replica's live feed. Cheap to clone; every clone is the same hub.
#[derive(Clone)]
pub struct Hub {
    inner: Arc<Inner>,
}

/// What the hub is doing, for `/metrics` and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveStats {
    /// Views with a refresher.
    pub views: usize,
    /// Open feed connections.
    pub subscribers: usize,
    /// View reads since the replica started.
    pub reads: u64,
}

/// Why a feed was not opened. Either way the page falls back to polling.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    TooManyViews(usize),
    TooManySubscribers(usize),
    TooManyForUser(usize),
}

/// One open feed; dropping it (the tab went away) gives its place back,
/// and the view's refresher stops once its last subscriber is gone.
pub struct Subscription {
    pub receiver: watch::Receiver<Snapshot>,
    _place: Place,
}

/// A subscriber's place, counted for the replica and for its user.
struct Place {
    inner: Arc<Inner>,
    user: String,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.inner.subscribers.fetch_sub(1, Ordering::AcqRel);
        let mut per_user = self.inner.per_user.lock().expect("poisoned");
        if let Some(n) = per_user.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                per_user.remove(&self.user);
            }
        }
    }
}

impl Hub {
    pub fn new(
        config: LiveConfig,
        backend: Backend,
        signals: Arc<Signals>,
        stopping: CancellationToken,
    ) -> Hub {
        Hub {
            inner: Arc::new(Inner {
                config,
                backend,
                signals,
                stopping,
                views: Mutex::default(),
                subscribers: AtomicUsize::new(0),
                per_user: Mutex::default(),
                reads: AtomicU64::new(0),
            }),
        }
    }

    /// Follows `feed` for `user`: joins its refresher, or starts one. The
    /// first value the receiver sees is the view as last read (or its
    /// first read).
    pub fn subscribe(&self, feed: Feed, user: &str) -> Result<Subscription, Refusal> {
        let key = feed.path();
        let config = &self.inner.config;
        // Under the lock: a refresher retiring checks its receivers under
        // it too, so no subscriber joins a refresher that is leaving.
        let mut views = self.inner.views.lock().expect("poisoned");
        // The user's bound first: it names what this user can do about it.
        let mut per_user = self.inner.per_user.lock().expect("poisoned");
        if per_user
            .get(user)
            .is_some_and(|n| *n >= config.max_per_user)
        {
            return Err(Refusal::TooManyForUser(config.max_per_user));
        }
        if self.inner.subscribers.load(Ordering::Acquire) >= config.max_subscribers {
            return Err(Refusal::TooManySubscribers(config.max_subscribers));
        }
        let sender = match views.get(&key) {
            Some(sender) => sender.clone(),
            None => {
                if views.len() >= config.max_views {
                    return Err(Refusal::TooManyViews(config.max_views));
                }
                let sender = Arc::new(watch::Sender::new(None));
                views.insert(key.clone(), sender.clone());
                tokio::spawn(Refresher::new(self.inner.clone(), key, feed, sender.clone()).run());
                sender
            }
        };
        let receiver = sender.subscribe();
        self.inner.subscribers.fetch_add(1, Ordering::AcqRel);
        *per_user.entry(user.to_owned()).or_default() += 1;
        Ok(Subscription {
            receiver,
            _place: Place {
                inner: self.inner.clone(),
                user: user.to_owned(),
            },
        })
    }

    pub fn stats(&self) -> LiveStats {
        LiveStats {
            views: self.inner.views.lock().expect("poisoned").len(),
            subscribers: self.inner.subscribers.load(Ordering::Acquire),
            reads: self.inner.reads.load(Ordering::Relaxed),
        }
    }

    pub(super) fn stopping(&self) -> &CancellationToken {
        &self.inner.stopping
    }
}

impl IntoResponse for Refusal {
    /// 503 with `Retry-After`: the replica is at its bound, not the client
    /// at fault; its page polls meanwhile.
    fn into_response(self) -> Response {
        let message = match self {
            Refusal::TooManyViews(n) => format!(
                "this replica already follows {n} different live views (BATON_LIVE_MAX_VIEWS); \
                 the page refreshes by polling instead"
            ),
            Refusal::TooManySubscribers(n) => format!(
                "this replica already serves {n} live connections \
                 (BATON_LIVE_MAX_SUBSCRIBERS); the page refreshes by polling instead"
            ),
            Refusal::TooManyForUser(n) => format!(
                "you already have {n} live connections on this replica \
                 (BATON_LIVE_MAX_PER_USER); the page refreshes by polling instead"
            ),
        };
        let mut response = (StatusCode::SERVICE_UNAVAILABLE, message).into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("30"));
        response
    }
}
