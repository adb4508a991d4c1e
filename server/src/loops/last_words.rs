//! A stop fits in `BATON_SHUTDOWN_GRACE`, whatever the database does
//! (docs/design.md, "Graceful shutdown"): executions get the grace less a
//! reserve, and the replica's last writes (finishes, the hand-back, its
//! heartbeat row's removal) share that reserve. With the database gone,
//! the first would take it all and the rest nothing, so the process still
//! exits within the grace, as a supervisor that kills after it (systemd's
//! `TimeoutStopSec`, Kubernetes' `terminationGracePeriodSeconds`) expects.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::LAST_WRITE;

/// The deadline of the last writes, fixed by whoever starts them first.
#[derive(Clone, Debug)]
pub struct LastWords {
    reserve: Duration,
    deadline: Arc<OnceLock<Instant>>,
}

impl LastWords {
    /// The last words of a stop with `grace`: [`LAST_WRITE`], or half of
    /// a grace shorter than twice that.
    pub fn within(grace: Duration) -> Self {
        LastWords {
            reserve: LAST_WRITE.min(grace / 2),
            deadline: Arc::default(),
        }
    }

    /// How long of the grace the last writes keep for themselves.
    pub fn reserve(&self) -> Duration {
        self.reserve
    }

    /// A stop was asked for: whatever comes, the last words end when its
    /// grace does (unless they began already).
    pub fn end_by(&self, grace_ends: Instant) {
        let _ = self.deadline.set(grace_ends);
    }

    /// Starts the last words now, unless a deadline is set already; returns
    /// the time they must be done by.
    pub fn begin(&self) -> Instant {
        *self.deadline.get_or_init(|| Instant::now() + self.reserve)
    }

    /// For a write that starts once the runs' last words are under way
    /// (the heartbeat row's removal, loops still ending): their deadline,
    /// and never more than [`LAST_WRITE`] from now.
    pub fn end_of_last_write(&self) -> Instant {
        self.begin().min(Instant::now() + LAST_WRITE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_last_write_shares_the_first_ones_deadline() {
        let words = LastWords::within(Duration::from_secs(30));
        assert_eq!(words.reserve(), LAST_WRITE);
        let first = words.begin();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(words.clone().begin(), first);
        assert!(first <= Instant::now() + LAST_WRITE);
    }

    #[test]
    fn last_words_end_with_the_grace() {
        let words = LastWords::within(Duration::from_secs(10));
        let grace_ends = Instant::now() + Duration::from_secs(10);
        words.end_by(grace_ends);
        assert_eq!(words.begin(), grace_ends);
    }

    #[test]
    fn a_short_grace_keeps_half_for_the_last_words() {
        let words = LastWords::within(Duration::from_secs(1));
        assert_eq!(words.reserve(), Duration::from_millis(500));
        assert_eq!(LastWords::within(Duration::ZERO).reserve(), Duration::ZERO);
    }
}
