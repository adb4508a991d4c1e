//! What a replica's live hub and the refreshers it starts share: the
//! latest view of each feed and the hub's counts. Its own file so that
//! the hub (which starts refreshers) and a refresher (which hands its
//! view back) both stand on it, rather than on each other.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};

use app::backend::Backend;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::LiveConfig;
use crate::store::Signals;

/// The latest encoded view of one feed; `None` until its first read.
pub type Snapshot = Option<Arc<str>>;

/// The hub's state.
pub(super) struct Inner {
    pub(super) config: LiveConfig,
    /// What server functions find in context.
    pub(super) backend: Backend,
    /// The store's wake-ups: each refresher follows their generation.
    pub(super) signals: Arc<Signals>,
    /// Fires when the replica stops: streams end, so shutdown does not
    /// wait for tabs that would never close.
    pub(super) stopping: CancellationToken,
    /// Each watched view's channel, by the feed's path. A view is here
    /// exactly while its refresher runs.
    pub(super) views: Mutex<HashMap<String, Arc<watch::Sender<Snapshot>>>>,
    pub(super) subscribers: AtomicUsize,
    /// Open feed connections by user.
    pub(super) per_user: Mutex<HashMap<String, usize>>,
    pub(super) reads: AtomicU64,
}

impl Inner {
    /// Removes `key`'s view if nobody watches it any more; `false` when a
    /// subscriber arrived meanwhile and the refresher must go on.
    pub(super) fn retire(&self, key: &str, sender: &watch::Sender<Snapshot>) -> bool {
        let mut views = self.views.lock().expect("poisoned");
        if sender.receiver_count() > 0 {
            return false;
        }
        views.remove(key);
        true
    }

    /// On shutdown: the view goes whoever still watches.
    pub(super) fn forget(&self, key: &str) {
        self.views.lock().expect("poisoned").remove(key);
    }
}
