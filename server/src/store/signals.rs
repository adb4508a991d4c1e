//! Wake-ups between the store and the scheduler loops.
//!
//! After a commit that makes runs AVAILABLE, frees a slot or cancels a run,
//! the store pokes the matching [`tokio::sync::Notify`] so the loop in this
//! process reacts at once; on PostgreSQL the same transaction also sends a
//! NOTIFY that other replicas' listeners turn into the same pokes. Each
//! `Notify` has exactly one waiting loop, and `notify_one` keeps a permit
//! when that loop is busy, so no wake-up is lost; polling stays as the
//! fallback for anything else.

use tokio::sync::Notify;

/// The PostgreSQL channel every replica listens on.
pub const CHANNEL: &str = "baton";

#[derive(Default, Debug)]
pub struct Signals {
    /// Runs became AVAILABLE: claimers should claim.
    pub available: Notify,
    /// Runs were created or finished (a target or limit slot freed): the
    /// promoter should run a round.
    pub changed: Notify,
    /// Runs were cancelled: executors should check their fences.
    pub canceled: Notify,
}

/// What a NOTIFY payload (or a local commit) announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Available,
    Changed,
    Canceled,
}

impl Signal {
    pub fn payload(self) -> &'static str {
        match self {
            Signal::Available => "available",
            Signal::Changed => "changed",
            Signal::Canceled => "canceled",
        }
    }

    pub fn from_payload(text: &str) -> Option<Self> {
        [Signal::Available, Signal::Changed, Signal::Canceled]
            .into_iter()
            .find(|s| s.payload() == text)
    }
}

impl Signals {
    pub fn raise(&self, signal: Signal) {
        match signal {
            Signal::Available => self.available.notify_one(),
            Signal::Changed => self.changed.notify_one(),
            Signal::Canceled => self.canceled.notify_one(),
        }
    }
}
