//! What a store keeps besides its connections, the same for every dialect.

use std::sync::{Arc, RwLock};

use crate::store::notify::NotifyTargets;
use crate::store::signals::Signals;

#[derive(Default)]
pub struct Shared {
    /// Wake-ups raised by this store's commits (and, on PostgreSQL, by
    /// other replicas' through NOTIFY).
    signals: Arc<Signals>,
    /// Where notifications go; set at start-up.
    targets: RwLock<NotifyTargets>,
}

impl Shared {
    pub fn signals(&self) -> &Arc<Signals> {
        &self.signals
    }

    pub fn targets(&self) -> NotifyTargets {
        self.targets.read().expect("poisoned").clone()
    }

    pub fn set_targets(&self, targets: NotifyTargets) {
        *self.targets.write().expect("poisoned") = targets;
    }
}
