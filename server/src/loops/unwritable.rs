//! How long the database could not be written, as the sweeper saw it
//! (docs/design.md, "Liveness"): a replica's missing heartbeat is evidence
//! against it only if the database could take that heartbeat. When sweep
//! rounds fail or wait for their table locks (a database restarting, an
//! outside client's `LOCK TABLE`, connections being killed), heartbeats
//! fail or wait too; so the stretch from the last good round to the next
//! one is written off, and every verdict for a while after is judged that
//! much earlier — long enough for every replica and run to beat again.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The sweeper's memory of its troubled stretches.
#[derive(Debug)]
pub struct Unwritable {
    /// How long a stretch keeps extending verdicts after it ended.
    window: Duration,
    /// When the last round that judged anything began.
    last_good: Option<Instant>,
    /// A round since then failed or was kept waiting.
    troubled: bool,
    /// Stretches with when they ended, oldest first.
    stretches: VecDeque<(Instant, Duration)>,
}

impl Unwritable {
    /// Stretches count for `window` after they end: `stale_after`, the
    /// longest a replica may go without a recorded heartbeat.
    pub fn new(window: Duration) -> Self {
        Unwritable {
            window,
            last_good: None,
            troubled: false,
            stretches: VecDeque::new(),
        }
    }

    /// A round failed or was kept waiting: no verdict came of it.
    pub fn troubled(&mut self) {
        self.troubled = true;
    }

    /// The grace for verdicts judged at `now`: the longest stretch that
    /// ended within the window, or the one still open if rounds have been
    /// troubled since the last good one. A stretch counts from the last
    /// good round, not from the first troubled one: heartbeats may have
    /// been kept waiting since just after it.
    pub fn grace(&self, now: Instant) -> Duration {
        let open = self.open_stretch(now).unwrap_or_default();
        self.stretches
            .iter()
            .filter(|(ended, _)| now.saturating_duration_since(*ended) <= self.window)
            .map(|(_, stretch)| *stretch)
            .fold(open, Duration::max)
    }

    /// A round begun at `at` judged: it is the last good one now. Returns
    /// the stretch it closed, if rounds were troubled before it.
    pub fn judged(&mut self, at: Instant) -> Option<Duration> {
        let closed = self.open_stretch(at);
        if let Some(stretch) = closed {
            self.stretches.push_back((at, stretch));
        }
        self.troubled = false;
        self.last_good = Some(at);
        while self
            .stretches
            .front()
            .is_some_and(|(ended, _)| at.saturating_duration_since(*ended) > self.window)
        {
            self.stretches.pop_front();
        }
        closed
    }

    fn open_stretch(&self, now: Instant) -> Option<Duration> {
        match (self.troubled, self.last_good) {
            (true, Some(last)) => Some(now.saturating_duration_since(last)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    /// One round at `at`: its grace, then judged.
    fn round(u: &mut Unwritable, at: Instant) -> Duration {
        let grace = u.grace(at);
        u.judged(at);
        grace
    }

    #[test]
    fn only_troubled_stretches_extend_verdicts_and_only_for_a_while() {
        let t0 = Instant::now();
        let mut u = Unwritable::new(10 * SECOND);
        assert_eq!(round(&mut u, t0), Duration::ZERO, "nothing known yet");
        // A late round alone (a descheduled process) is no evidence.
        assert_eq!(round(&mut u, t0 + 3 * SECOND), Duration::ZERO);
        // Rounds fail for 20 s: the stretch from the last good round is
        // written off, the rounds that failed included.
        u.troubled();
        assert_eq!(u.grace(t0 + 10 * SECOND), 7 * SECOND);
        u.troubled();
        let back = t0 + 24 * SECOND;
        assert_eq!(u.grace(back), 21 * SECOND);
        assert_eq!(u.judged(back), Some(21 * SECOND));
        assert_eq!(
            round(&mut u, back + SECOND),
            21 * SECOND,
            "within the window"
        );
        assert_eq!(round(&mut u, back + 10 * SECOND), 21 * SECOND);
        assert_eq!(round(&mut u, back + 11 * SECOND), Duration::ZERO, "over");
        // The longest of several counts.
        let t1 = back + 20 * SECOND;
        round(&mut u, t1);
        u.troubled();
        assert_eq!(round(&mut u, t1 + 2 * SECOND), 2 * SECOND);
        u.troubled();
        assert_eq!(round(&mut u, t1 + 7 * SECOND), 5 * SECOND);
        assert_eq!(round(&mut u, t1 + 8 * SECOND), 5 * SECOND);
    }
}
