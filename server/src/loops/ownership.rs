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
    proof: Mutex<Proof>,
    /// How long after that this replica still trusts its ownership.
    margin: Duration,
}

#[derive(Debug)]
struct Proof {
    /// When the last heartbeat that was recorded was sent.
    at: Instant,
    /// When ownership was last proven again after it had lapsed: the
    /// answer that ended the lapse. The sweeper may have failed any run
    /// claimed before then.
    lapse_ended: Option<Instant>,
}

impl Ownership {
    /// Trusted for three quarters of `stale_after` after each recorded
    /// heartbeat.
    pub fn new(stale_after: Duration) -> Self {
        Ownership {
            proof: Mutex::new(Proof {
                at: Instant::now(),
                lapse_ended: None,
            }),
            margin: stale_after * 3 / 4,
        }
    }

    /// A heartbeat sent at `sent` was recorded (its answer arrived now).
    pub fn proven(&self, sent: Instant) {
        let now = Instant::now();
        let mut proof = self.proof.lock().expect("ownership lock");
        if now >= proof.at + self.margin {
            proof.lapse_ended = Some(now);
        }
        proof.at = proof.at.max(sent);
    }

    /// The instant after which ownership can no longer be proven.
    pub fn deadline(&self) -> Instant {
        self.proof.lock().expect("ownership lock").at + self.margin
    }

    pub fn provable(&self) -> bool {
        Instant::now() < self.deadline()
    }

    /// Whether ownership has been provable at every instant from `since`
    /// until now. A claim sent at `since` and answered after a lapse may
    /// hold runs the sweeper failed during it, whose retries may already
    /// run elsewhere, even though a later heartbeat proves the replica
    /// alive again (the chaos harness saw such a run started 2.5 s late,
    /// beside its retry).
    pub fn unbroken_since(&self, since: Instant) -> bool {
        let now = Instant::now();
        let proof = self.proof.lock().expect("ownership lock");
        now < proof.at + self.margin && proof.lapse_ended.is_none_or(|ended| ended <= since)
    }

    /// How long ago ownership was last proven, for messages.
    pub fn unproven_for(&self) -> Duration {
        self.proof.lock().expect("ownership lock").at.elapsed()
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
        ownership.proof.lock().unwrap().at = long_ago;
        assert!(!ownership.provable());
        // An older success recorded late does not move the clock back.
        ownership.proven(long_ago - Duration::from_secs(1));
        assert!(!ownership.provable());
        ownership.proven(Instant::now());
        assert!(ownership.provable());
    }

    #[test]
    fn a_lapse_breaks_the_proof_of_what_was_claimed_before_it() {
        let ownership = Ownership::new(Duration::from_secs(10));
        let claim_sent = Instant::now();
        assert!(ownership.unbroken_since(claim_sent));
        // Answered in time: a heartbeat recorded before the proof lapsed.
        ownership.proven(Instant::now());
        assert!(ownership.unbroken_since(claim_sent));
        // The proof lapses (the last recorded heartbeat was sent 8 s ago,
        // past three quarters of 10 s), then a heartbeat sent before the
        // lapse is answered: alive again, but not unbroken since the claim.
        let long_ago = Instant::now()
            .checked_sub(Duration::from_secs(8))
            .expect("uptime");
        ownership.proof.lock().unwrap().at = long_ago;
        assert!(!ownership.unbroken_since(claim_sent));
        ownership.proven(long_ago + Duration::from_secs(2));
        assert!(ownership.provable());
        assert!(!ownership.unbroken_since(claim_sent));
        // A claim sent after the lapse ended is proven again.
        assert!(ownership.unbroken_since(Instant::now()));
    }
}
