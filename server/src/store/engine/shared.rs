//! What a store keeps besides its connections, the same for every dialect.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use crate::plan::CommandPolicy;
use crate::store::engine::notifications::NotifyTargets;
use crate::store::signals::Signals;

#[derive(Default)]
pub struct Shared {
    /// Wake-ups raised by this store's commits (and, on PostgreSQL, by
    /// other replicas' through NOTIFY).
    signals: Arc<Signals>,
    /// Where notifications go; set at start-up.
    targets: RwLock<NotifyTargets>,
    /// Which commands this server runs; set at start-up. Schedules' ticks
    /// and triggers make plans inside the store, past the API's check.
    commands: RwLock<CommandPolicy>,
    /// Whether the last look found that a replica of an older build may
    /// write (`engine::queue_repair`).
    older_builds: AtomicBool,
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

    pub fn commands(&self) -> CommandPolicy {
        self.commands.read().expect("poisoned").clone()
    }

    pub fn set_commands(&self, commands: CommandPolicy) {
        *self.commands.write().expect("poisoned") = commands;
    }

    pub fn older_builds(&self) -> bool {
        self.older_builds.load(Ordering::Relaxed)
    }

    pub fn set_older_builds(&self, may_write: bool) {
        self.older_builds.store(may_write, Ordering::Relaxed);
    }
}
