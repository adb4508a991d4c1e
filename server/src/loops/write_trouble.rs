//! When this replica last saw the database refuse or hold up one of its
//! liveness writes (a heartbeat, a sweep round): evidence the sweeper
//! takes into its next verdicts (`store::engine::sweep_memory`).
//!
//! The sweeper's own rounds see trouble only while this replica leads. A
//! replica that takes the lease once the database is back (after a
//! restart, say, that also cost the old leader its lease) saw the outage
//! through its heartbeat instead, and its first verdicts must discount it
//! as well: the runs whose heartbeats failed meanwhile have not yet beaten
//! again.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use domain::time::Ts;

/// Shared by the replica heartbeat and the sweeper; cheap to clone.
#[derive(Clone, Default, Debug)]
pub struct WriteTrouble {
    /// Microseconds on the database's clock; 0 before any trouble.
    latest_micros: Arc<AtomicI64>,
}

impl WriteTrouble {
    /// A write failed or waited for a lock just now.
    pub fn seen(&self) {
        self.latest_micros
            .fetch_max(Ts::now().micros(), Ordering::SeqCst);
    }

    /// When the latest trouble was seen, if ever.
    pub fn latest(&self) -> Option<Ts> {
        match self.latest_micros.load(Ordering::SeqCst) {
            0 => None,
            micros => Some(Ts::from_micros(micros)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trouble_one_clone_sees_every_clone_knows() {
        let trouble = WriteTrouble::default();
        assert_eq!(trouble.latest(), None);
        // The heartbeat holds one clone, the sweeper another.
        trouble.clone().seen();
        assert!(trouble.latest().is_some(), "seen through a clone");
    }
}
