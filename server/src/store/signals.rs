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
    /// Raised with `changed` (a finish may have queued a webhook): the
    /// deliverer should look at the outbox. Its own `Notify`, because
    /// `notify_one` wakes one waiter: sharing `changed` with the promoter
    /// let the deliverer take the promoter's wake-up, and a run then
    /// waited for the next poll (a second) to be promoted.
    pub deliveries: Notify,
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
            Signal::Changed => {
                self.changed.notify_one();
                self.deliveries.notify_one();
            }
            Signal::Canceled => self.canceled.notify_one(),
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::{Signal, Signals};

    /// The promoter and the deliverer both wait for `Changed`; one raise
    /// must wake both at once, whichever started waiting first.
    #[test]
    fn a_change_wakes_the_promoter_and_the_deliverer() {
        let signals = Signals::default();
        let mut deliverer = std::pin::pin!(signals.deliveries.notified());
        let mut promoter = std::pin::pin!(signals.changed.notified());
        deliverer.as_mut().enable();
        promoter.as_mut().enable();
        signals.raise(Signal::Changed);
        assert!(deliverer.now_or_never().is_some(), "the deliverer slept on");
        assert!(promoter.now_or_never().is_some(), "the promoter slept on");
    }
}
