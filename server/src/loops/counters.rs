//! What this replica has done since it started, for `/metrics`: counters
//! only go up, so Prometheus can take rates of them across scrapes and
//! restarts.

use std::sync::atomic::{AtomicU64, Ordering};

use domain::model::RunStatus;

/// Which of a replica's two claims took a run: its claimer, or (on the
/// leader) its promotion round, which claims what it promotes while the
/// replica has free slots. Counted apart so an operator can see how much
/// of the work the leader takes before the other replicas hear of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimant {
    Claimer,
    Round,
}

#[derive(Debug, Default)]
pub struct RunCounters {
    claimed: AtomicU64,
    /// Of `claimed`, those the leader's own promotion round claimed.
    claimed_in_round: AtomicU64,
    done: AtomicU64,
    failed: AtomicU64,
    canceled: AtomicU64,
    /// Finishes not recorded: the run was no longer this replica's.
    fenced: AtomicU64,
}

/// A snapshot of [`RunCounters`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RunCounts {
    pub claimed: u64,
    pub claimed_in_round: u64,
    pub done: u64,
    pub failed: u64,
    pub canceled: u64,
    pub fenced: u64,
}

impl RunCounters {
    pub fn claimed(&self, n: usize, by: Claimant) {
        self.claimed.fetch_add(n as u64, Ordering::Relaxed);
        if by == Claimant::Round {
            self.claimed_in_round.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// A finish the store recorded with this final status.
    pub fn finished(&self, status: RunStatus) {
        let counter = match status {
            RunStatus::Done => &self.done,
            RunStatus::Failed => &self.failed,
            RunStatus::Canceled => &self.canceled,
            // A finish is always final; anything else is not a finish.
            RunStatus::Pending | RunStatus::Available | RunStatus::Running => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn fenced(&self, n: usize) {
        self.fenced.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> RunCounts {
        RunCounts {
            claimed: self.claimed.load(Ordering::Relaxed),
            claimed_in_round: self.claimed_in_round.load(Ordering::Relaxed),
            done: self.done.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            canceled: self.canceled.load(Ordering::Relaxed),
            fenced: self.fenced.load(Ordering::Relaxed),
        }
    }
}
