//! The one clock every replica judges time by: the database's
//! (docs/design.md, "One clock").
//!
//! Leases, heartbeats, staleness, deadlines, backoffs and `run_at` are all
//! instants written to and compared in the database. Were each replica to
//! stamp them from its own wall clock, one host a few seconds ahead would
//! take the leader lease early and see healthy replicas as dead, and one
//! hours ahead would write a lease nobody could take after it died. So a
//! replica reads the database's clock ([`Sample`]), anchors it to its own
//! monotonic clock, and [`now`] counts on from that anchor: the host's wall
//! clock is not consulted again, whatever it does (a step, a leap smear, a
//! VM resumed from suspend). The anchor is measured again every heartbeat
//! ([`crate::liveness::ClockSync`]), which keeps the drift of the monotonic
//! clock (parts per million) to well under a millisecond.
//!
//! Until a sample arrives (a CLI command that never connects, a SQLite
//! store, whose database clock *is* this host's), [`now`] is the wall clock.
//! Taking the samples is the server's store (`store/clock.rs`).

use std::sync::LazyLock;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;

/// A skew beyond this is worth an operator's attention: the replica's own
/// decisions are unaffected, but its commands and its logs see the wrong
/// time, and a clock this far off usually has no time service at all.
pub const SKEW_WARNING: Duration = Duration::from_millis(crate::model::CLOCK_SKEW_WARNING_MS);

/// A sample whose round trip took longer than this says little about when
/// the database read its clock; it is not adopted over an anchor already
/// held (a locked or overloaded database answers late).
const TRUSTED_ROUND_TRIP: Duration = Duration::from_millis(200);

/// Not adopted unless it moves the anchor by more than its own uncertainty
/// plus this: re-anchoring on every sample would make [`now`] jitter back
/// and forth by fractions of a round trip.
const STEADY: Duration = Duration::from_millis(2);

/// How many samples the first anchoring takes, keeping the quickest: a
/// replica starting beside a busy database must not anchor on a slow one.
pub const FIRST_SAMPLES: usize = 5;

/// No anchor yet.
const UNANCHORED: i64 = i64::MIN;

/// The process's clock: the anchor and the last skew measured.
static CLOCK: LazyLock<Clock> = LazyLock::new(Clock::new);

/// The database's time now, in Unix microseconds (the wall clock until the
/// first sample).
pub fn now_micros() -> i64 {
    CLOCK.now_micros()
}

/// How far this host's wall clock is ahead of the database's (negative:
/// behind), as last measured; zero before any sample.
pub fn skew() -> chrono::TimeDelta {
    CLOCK.skew()
}

/// Re-anchors this process's clock on `sample` where it tells more than
/// the anchor held, and records the host's skew.
pub fn adopt(sample: &Sample) -> Adopted {
    CLOCK.adopt(sample)
}

/// Whether a skew is beyond [`SKEW_WARNING`] either way.
pub fn skew_is_notable(skew: chrono::TimeDelta) -> bool {
    crate::model::clock_skew_is_notable(skew.num_milliseconds())
}

/// An anchor of the database's clock on this process's monotonic clock.
struct Clock {
    /// What [`Clock::now_micros`] counts from.
    origin: Instant,
    /// The database's time at `origin`, in Unix microseconds.
    database_at_origin: AtomicI64,
    /// This host's wall clock minus the database's, as last measured.
    skew_micros: AtomicI64,
}

impl Clock {
    fn new() -> Self {
        Clock {
            origin: Instant::now(),
            database_at_origin: AtomicI64::new(UNANCHORED),
            skew_micros: AtomicI64::new(0),
        }
    }

    fn now_micros(&self) -> i64 {
        match self.database_at_origin.load(Ordering::Relaxed) {
            UNANCHORED => Utc::now().timestamp_micros(),
            at_origin => at_origin.saturating_add(micros(self.origin.elapsed())),
        }
    }

    fn skew(&self) -> chrono::TimeDelta {
        chrono::TimeDelta::microseconds(self.skew_micros.load(Ordering::Relaxed))
    }

    fn adopt(&self, sample: &Sample) -> Adopted {
        let round_trip = sample.round_trip();
        let held = self.database_at_origin.load(Ordering::Relaxed);
        if held != UNANCHORED && round_trip > TRUSTED_ROUND_TRIP {
            return Adopted::Untrusted;
        }
        let half = micros(round_trip / 2);
        self.skew_micros.store(
            sample
                .wall_at_sent
                .saturating_add(half)
                .saturating_sub(sample.database),
            Ordering::Relaxed,
        );
        // The database read its clock somewhere in the round trip; the
        // middle is the best guess, off by at most half the round trip.
        let middle = sample.sent + round_trip / 2;
        let measured = sample
            .database
            .saturating_sub(micros(middle.saturating_duration_since(self.origin)));
        if held != UNANCHORED && measured.abs_diff(held) <= (half + micros(STEADY)) as u64 {
            return Adopted::Kept;
        }
        self.database_at_origin.store(measured, Ordering::Relaxed);
        let was = if held == UNANCHORED {
            // The wall clock [`Clock::now_micros`] read until now.
            sample
                .wall_at_sent
                .saturating_sub(micros(sample.sent.saturating_duration_since(self.origin)))
        } else {
            held
        };
        Adopted::Moved(chrono::TimeDelta::microseconds(
            measured.saturating_sub(was),
        ))
    }
}

/// One reading of the database's clock, taken between two local instants.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Just before the query was sent.
    pub sent: Instant,
    /// This host's wall clock at `sent`, in Unix microseconds.
    pub wall_at_sent: i64,
    /// Just after the answer arrived.
    pub received: Instant,
    /// What the database's clock read, in Unix microseconds.
    pub database: i64,
}

impl Sample {
    pub fn round_trip(&self) -> Duration {
        self.received.saturating_duration_since(self.sent)
    }
}

/// What [`adopt`] made of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adopted {
    /// The anchor moved (or was set for the first time) by this much.
    Moved(chrono::TimeDelta),
    /// The anchor already agreed with the sample.
    Kept,
    /// The sample's round trip was too long to trust over the anchor held.
    Untrusted,
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample as if the database's clock were `ahead` of this host's,
    /// with a round trip of `round_trip`.
    fn sample(ahead: Duration, round_trip: Duration) -> Sample {
        let sent = Instant::now();
        let wall_at_sent = Utc::now().timestamp_micros();
        Sample {
            sent,
            wall_at_sent,
            received: sent + round_trip,
            database: wall_at_sent + micros(round_trip / 2) + micros(ahead),
        }
    }

    #[test]
    fn now_follows_the_database_clock_not_the_hosts() {
        let clock = Clock::new();
        let hours = Duration::from_secs(3 * 3600);
        let adopted = clock.adopt(&sample(hours, Duration::from_millis(1)));
        let Adopted::Moved(by) = adopted else {
            panic!("the first sample anchors: {adopted:?}")
        };
        assert!((by.num_seconds() - 3 * 3600).abs() <= 1, "{by:?}");
        let ahead = clock.now_micros() - Utc::now().timestamp_micros();
        assert!(
            (ahead - micros(hours)).abs() < 50_000,
            "now is the database's time: {ahead} µs ahead of the wall clock"
        );
        // This host is three hours behind the database.
        let skew = clock.skew();
        assert!((skew.num_seconds() + 3 * 3600).abs() <= 1, "{skew:?}");
        assert!(skew_is_notable(skew));
    }

    #[test]
    fn a_sample_within_its_own_uncertainty_keeps_the_anchor() {
        let clock = Clock::new();
        let four = Duration::from_secs(4);
        let quick = Duration::from_millis(1);
        assert!(matches!(
            clock.adopt(&sample(four, quick)),
            Adopted::Moved(_)
        ));
        assert_eq!(clock.adopt(&sample(four, quick)), Adopted::Kept);
        // A database that answers after a second (a lock held) says little.
        assert_eq!(
            clock.adopt(&sample(Duration::ZERO, Duration::from_secs(1))),
            Adopted::Untrusted
        );
        // The database's clock agrees with the host's again (the host's was
        // stepped): the next good sample re-anchors.
        assert!(matches!(
            clock.adopt(&sample(Duration::ZERO, quick)),
            Adopted::Moved(by) if (by.num_milliseconds() + 4000).abs() < 50
        ));
        assert!(!skew_is_notable(clock.skew()));
    }

    #[test]
    fn before_any_sample_now_is_the_wall_clock() {
        let clock = Clock::new();
        let wall = Utc::now().timestamp_micros();
        assert!((clock.now_micros() - wall).abs() < 50_000);
        assert_eq!(clock.skew(), chrono::TimeDelta::zero());
    }
}
