//! A stopping replica's last writes (finishes, the hand-back, its
//! heartbeat row's removal) share one [`LAST_WRITE`]: with the database
//! gone, the first would take it all and the rest nothing, so the stop
//! ends that long after the executions, not that long for each write.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use super::LAST_WRITE;

/// The deadline of the last writes, fixed by whoever starts them first.
#[derive(Clone, Debug, Default)]
pub struct LastWords(Arc<OnceLock<Instant>>);

impl LastWords {
    /// Starts the last words now, unless they began already; returns the
    /// time they must be done by.
    pub fn begin(&self) -> Instant {
        *self.0.get_or_init(|| Instant::now() + LAST_WRITE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_last_write_shares_the_first_ones_deadline() {
        let words = LastWords::default();
        let first = words.begin();
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(words.clone().begin(), first);
        assert!(first <= Instant::now() + LAST_WRITE);
    }
}
