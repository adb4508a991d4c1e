//! Whether this replica can still prove it owns its runs.
//!
//! Other replicas judge a replica by the heartbeat row it last wrote: once
//! that row is `stale_after` old, the leader fails the replica's RUNNING
//! runs and their retries may start elsewhere. A replica cut off from the
//! database (a network partition, a database it can no longer reach while
//! others can) keeps running; if its executions carried on, they would run
//! beside their retries. So a replica counts from the moment it *sent* its
//! last heartbeat that was recorded: past three quarters of `stale_after`
//! it stops claiming and stops every execution, before anyone may sweep
//! them. (Not half, as a command's supervisor uses: this clock runs inside
//! the replica, and a replica merely starved of CPU for half of
//! `stale_after` would stop work nobody was about to take from it.)
//! The executions end FAILED with the reason, recorded once the database
//! answers again — or not at all, if the sweeper got there first.

use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Ownership {
    /// When the last heartbeat that was recorded was sent.
    proven_at: Mutex<Instant>,
    /// How long after that this replica still trusts its ownership.
    margin: Duration,
}

impl Ownership {
    /// Trusted for three quarters of `stale_after` after each recorded
    /// heartbeat.
    pub fn new(stale_after: Duration) -> Self {
        Ownership {
            proven_at: Mutex::new(Instant::now()),
            margin: stale_after * 3 / 4,
        }
    }

    /// A heartbeat sent at `sent` was recorded.
    pub fn proven(&self, sent: Instant) {
        let mut at = self.proven_at.lock().expect("ownership lock");
        *at = (*at).max(sent);
    }

    /// The instant after which ownership can no longer be proven.
    pub fn deadline(&self) -> Instant {
        *self.proven_at.lock().expect("ownership lock") + self.margin
    }

    pub fn provable(&self) -> bool {
        Instant::now() < self.deadline()
    }

    /// How long ago ownership was last proven, for messages.
    pub fn unproven_for(&self) -> Duration {
        self.proven_at.lock().expect("ownership lock").elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ownership_lapses_before_staleness() {
        let ownership = Ownership::new(Duration::from_secs(10));
        assert!(ownership.provable());
        let long_ago = Instant::now()
            .checked_sub(Duration::from_secs(8))
            .expect("uptime");
        *ownership.proven_at.lock().unwrap() = long_ago;
        assert!(!ownership.provable());
        // An older success recorded late does not move the clock back.
        ownership.proven(long_ago - Duration::from_secs(1));
        assert!(!ownership.provable());
        ownership.proven(Instant::now());
        assert!(ownership.provable());
    }
}
