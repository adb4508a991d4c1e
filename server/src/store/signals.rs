//! Wake-ups between the store and the scheduler loops.
//!
//! After a commit that makes runs AVAILABLE, frees a slot or cancels a run,
//! the store pokes the matching [`tokio::sync::Notify`] so the loop in this
//! process reacts at once; on PostgreSQL the same transaction also sends a
//! NOTIFY that other replicas' listeners turn into the same pokes. Each
//! `Notify` has exactly one waiting loop, and `notify_one` keeps a permit
//! when that loop is busy, so no wake-up is lost; polling stays as the
//! fallback for anything else.
//!
//! The dashboard's live feed cannot share those `Notify`s (it would steal
//! the one loop's wake-up), so every raise also moves a generation
//! counter in a [`watch`] channel that any number of feed refreshers may
//! follow ([`Signals::changes`]). Commits that wake no loop but change
//! what a page shows (a claim, log lines) move it too, through
//! [`Signals::touch`].

use tokio::sync::{Notify, watch};

/// The PostgreSQL channel every replica listens on.
pub const CHANNEL: &str = "baton";

#[derive(Debug)]
pub struct Signals {
    /// Runs became AVAILABLE: claimers should claim.
    pub available: Notify,
    /// Runs were created or finished (a target or limit slot freed): the
    /// promoter should run a round.
    pub changed: Notify,
    /// Webhook deliveries were queued: the deliverer should look at the
    /// outbox. Raised only by the commits that queued some, not by every
    /// finish: with several replicas each deliverer heard every replica's
    /// every finish and asked the outbox for nothing, hundreds of empty
    /// transactions a second under load. Retries falling due are found by
    /// the deliverer's poll.
    pub deliveries: Notify,
    /// Runs were cancelled: executors should check their fences.
    pub canceled: Notify,
    /// Moves on every raise and touch: how the dashboard's feed learns
    /// that what it last read may be out of date.
    generation: watch::Sender<u64>,
    /// Moves when runs became AVAILABLE: how the agents' waiting takes
    /// (any number of them) learn it, beside the claimer's `available`.
    availability: watch::Sender<u64>,
}

impl Default for Signals {
    fn default() -> Self {
        Signals {
            available: Notify::new(),
            changed: Notify::new(),
            deliveries: Notify::new(),
            canceled: Notify::new(),
            generation: watch::Sender::new(0),
            availability: watch::Sender::new(0),
        }
    }
}

/// What a NOTIFY payload (or a local commit) announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Available,
    Changed,
    Canceled,
    Deliveries,
}

impl Signal {
    pub const ALL: [Signal; 4] = [
        Signal::Available,
        Signal::Changed,
        Signal::Canceled,
        Signal::Deliveries,
    ];

    pub fn payload(self) -> &'static str {
        match self {
            Signal::Available => "available",
            Signal::Changed => "changed",
            Signal::Canceled => "canceled",
            Signal::Deliveries => "deliveries",
        }
    }

    pub fn from_payload(text: &str) -> Option<Self> {
        Signal::ALL.into_iter().find(|s| s.payload() == text)
    }
}

impl Signals {
    pub fn raise(&self, signal: Signal) {
        match signal {
            Signal::Available => {
                self.available.notify_one();
                self.availability.send_modify(|g| *g = g.wrapping_add(1));
            }
            Signal::Changed => self.changed.notify_one(),
            Signal::Canceled => self.canceled.notify_one(),
            Signal::Deliveries => self.deliveries.notify_one(),
        }
        self.touch();
    }

    /// Tells the dashboard's feed (only) that something it shows changed:
    /// for commits no loop waits on, such as a claim or a log line.
    pub fn touch(&self) {
        self.generation.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// A receiver that sees every later raise and touch, in this process
    /// and (on PostgreSQL, once `signals_forward` runs) from other
    /// replicas' commits.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// A receiver that sees every later raise of [`Signal::Available`].
    pub fn availabilities(&self) -> watch::Receiver<u64> {
        self.availability.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::{Signal, Signals};

    /// A change (a submit, a finish) is the promoter's business; only
    /// queued deliveries wake the deliverer.
    #[test]
    fn a_change_wakes_the_promoter_and_queued_deliveries_the_deliverer() {
        let signals = Signals::default();
        let mut deliverer = std::pin::pin!(signals.deliveries.notified());
        let mut promoter = std::pin::pin!(signals.changed.notified());
        deliverer.as_mut().enable();
        promoter.as_mut().enable();
        signals.raise(Signal::Changed);
        assert!(promoter.now_or_never().is_some(), "the promoter slept on");
        assert!(
            deliverer.as_mut().now_or_never().is_none(),
            "a change woke the deliverer"
        );
        signals.raise(Signal::Deliveries);
        assert!(deliverer.now_or_never().is_some(), "the deliverer slept on");
    }

    /// Every raise, and a touch, reaches each feed subscriber; none of
    /// them consumes another's.
    #[test]
    fn raises_and_touches_move_every_feed_subscriber() {
        let signals = Signals::default();
        let mut one = signals.changes();
        let two = signals.changes();
        signals.raise(Signal::Available);
        assert!(one.has_changed().unwrap() && two.has_changed().unwrap());
        one.borrow_and_update();
        assert!(!one.has_changed().unwrap(), "one saw it twice");
        assert!(two.has_changed().unwrap(), "one took two's change");
        signals.touch();
        assert!(one.has_changed().unwrap(), "a touch moved nothing");
    }

    /// Other replicas' NOTIFY payloads turn back into the same signals.
    #[test]
    fn every_signal_survives_its_payload() {
        for signal in Signal::ALL {
            assert_eq!(Signal::from_payload(signal.payload()), Some(signal));
        }
        assert_eq!(Signal::from_payload("something-newer"), None);
    }
}
