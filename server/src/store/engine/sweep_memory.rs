//! What the sweeper remembers of the stretches nobody could write
//! (docs/design.md, "Liveness"), kept in the database (`sweep_memory`,
//! one row) rather than in the leader's process.
//!
//! A heartbeat that waits for an outside client's lock, or fails while
//! the database restarts, is no evidence against its replica: the sweep
//! waits or fails as well. So a round that judges after troubled rounds
//! writes off the stretch since the last round that judged, and for the
//! next `window` every verdict is judged that much earlier, giving the
//! replicas and runs whose heartbeats waited time to beat again.
//!
//! The leader lease often changes hands in such a stretch (the leader's
//! renewals wait behind the same lock), and a leader that kept this in
//! memory took it with it: its successor, whose first rounds were the
//! troubled ones, knew no last good round and judged at once, failing a
//! run whose command had just exited 0 on an agent and running it again.
//! In the database, the successor writes off the stretch from its
//! predecessor's last good round, and honours a stretch its predecessor
//! closed.

use std::time::Duration;

use super::{Dialect, one};
use crate::store::Result;
use domain::time::Ts;

const MEMORY_GET: &str =
    "SELECT judged_at, written_off_ms, written_off_until FROM sweep_memory WHERE id = 1";
const MEMORY_SET: &str = "UPDATE sweep_memory
    SET judged_at = $1, written_off_ms = $2, written_off_until = $3 WHERE id = 1";

/// The row as read at the start of a round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SweepMemory {
    /// When the last round that judged began; none before the first.
    pub judged_at: Option<Ts>,
    /// How much earlier verdicts are judged, while `until` is ahead.
    pub written_off: Duration,
    pub until: Option<Ts>,
}

/// What a round that judges at `now` makes of the memory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdicts {
    /// How long before `now` this round judges.
    pub grace: Duration,
    /// The stretch this round closed, if rounds were troubled since the
    /// last that judged.
    pub closed: Option<Duration>,
    /// The memory to store.
    pub next: SweepMemory,
}

impl SweepMemory {
    /// The round judging at `now`, the latest trouble this replica saw
    /// being `troubled_at` (a round that failed or waited for its locks).
    /// Trouble seen before the last round that judged, by whichever
    /// leader, is over: that round found the database writable. Trouble
    /// before any round ever judged writes off a whole `window`, as the
    /// stretch has no known start.
    ///
    /// Stamps from a clock ahead of this one (a leader whose host clock
    /// jumped) are held to `now`, and a write-off to one `window` from
    /// `now`: such a row then holds verdicts back for one `window` at
    /// most, not for the hours it is ahead.
    pub fn judge(&self, troubled_at: Option<Ts>, window: Duration, now: Ts) -> Verdicts {
        let this = SweepMemory {
            judged_at: self.judged_at.map(|judged| judged.min(now)),
            written_off: self.written_off,
            until: self.until.map(|until| until.min(now.plus(window))),
        };
        let in_force = match this.until {
            Some(until) if until >= now => this.written_off,
            _ => Duration::ZERO,
        };
        let closed = match (troubled_at, this.judged_at) {
            (Some(troubled), Some(judged)) if troubled > judged => Some(between(judged, now)),
            (Some(_), None) => Some(window),
            _ => None,
        };
        let next = match closed {
            // Overlapping stretches: the longest, for the longest window.
            Some(stretch) => SweepMemory {
                judged_at: Some(now),
                written_off: stretch.max(in_force),
                until: Some(match this.until {
                    Some(until) if !in_force.is_zero() => until.max(now.plus(window)),
                    _ => now.plus(window),
                }),
            },
            None => SweepMemory {
                judged_at: Some(now),
                ..this
            },
        };
        let grace = match next.until {
            Some(until) if until >= now => next.written_off,
            _ => Duration::ZERO,
        };
        Verdicts {
            grace,
            closed,
            next,
        }
    }

    pub async fn load<D: Dialect>(tx: &mut D::Tx) -> Result<Self> {
        let (judged_at, written_off_ms, until): (Option<Ts>, i64, Option<Ts>) =
            one::<D, _>(tx, MEMORY_GET, &[]).await?;
        Ok(SweepMemory {
            judged_at,
            written_off: Duration::from_millis(written_off_ms.max(0) as u64),
            until,
        })
    }

    pub async fn store<D: Dialect>(&self, tx: &mut D::Tx) -> Result<()> {
        let ms = i64::try_from(self.written_off.as_millis()).unwrap_or(i64::MAX);
        D::execute(
            tx,
            MEMORY_SET.into(),
            &[self.judged_at.into(), ms.into(), self.until.into()],
        )
        .await?;
        Ok(())
    }
}

/// From `earlier` to `later`, zero when it is not earlier.
fn between(earlier: Ts, later: Ts) -> Duration {
    (later.0 - earlier.0).to_std().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);
    const WINDOW: Duration = Duration::from_secs(10);

    /// Rounds at `t0 + secs`, each with the trouble seen before it.
    fn rounds(start: SweepMemory, t0: Ts, rounds: &[(u32, Option<u32>)]) -> Vec<Duration> {
        let mut memory = start;
        rounds
            .iter()
            .map(|&(at, troubled)| {
                let verdicts = memory.judge(
                    troubled.map(|t| t0.plus(t * SECOND)),
                    WINDOW,
                    t0.plus(at * SECOND),
                );
                memory = verdicts.next;
                verdicts.grace
            })
            .collect()
    }

    fn judged_at(t: Ts) -> SweepMemory {
        SweepMemory {
            judged_at: Some(t),
            written_off: Duration::ZERO,
            until: None,
        }
    }

    #[test]
    fn only_troubled_stretches_extend_verdicts_and_only_for_a_while() {
        let t0 = Ts::now();
        let graces = rounds(
            judged_at(t0),
            t0,
            &[
                // A late round alone (a descheduled process) is no evidence.
                (3, None),
                // Rounds failed from 4 s to 23 s: the stretch from the last
                // good round is written off, the failed rounds included.
                (24, Some(23)),
                (25, Some(23)),
                (34, None),
                (35, None),
            ],
        );
        assert_eq!(
            graces,
            [
                Duration::ZERO,
                21 * SECOND,
                21 * SECOND,
                21 * SECOND,
                Duration::ZERO
            ]
        );
    }

    #[test]
    fn a_new_leader_in_the_middle_of_a_stretch_counts_it_from_its_predecessors_last_round() {
        let t0 = Ts::now();
        // The predecessor judged at t0; the new leader's own rounds failed
        // until 5 s; it judges at 6 s.
        let verdicts = judged_at(t0).judge(Some(t0.plus(5 * SECOND)), WINDOW, t0.plus(6 * SECOND));
        assert_eq!(verdicts.grace, 6 * SECOND);
        assert_eq!(verdicts.closed, Some(6 * SECOND));
    }

    #[test]
    fn a_stretch_the_predecessor_closed_holds_for_its_successor() {
        let t0 = Ts::now();
        let closed = judged_at(t0)
            .judge(Some(t0.plus(3 * SECOND)), WINDOW, t0.plus(4 * SECOND))
            .next;
        // The successor saw no trouble of its own.
        let graces = rounds(closed, t0, &[(6, None), (14, None), (15, None)]);
        assert_eq!(graces, [4 * SECOND, 4 * SECOND, Duration::ZERO]);
    }

    #[test]
    fn trouble_before_the_last_judged_round_is_over() {
        let t0 = Ts::now();
        let verdicts = judged_at(t0).judge(Some(t0.minus(SECOND)), WINDOW, t0.plus(SECOND));
        assert_eq!((verdicts.grace, verdicts.closed), (Duration::ZERO, None));
    }

    #[test]
    fn overlapping_stretches_keep_the_longest_for_the_longest_window() {
        let t0 = Ts::now();
        let graces = rounds(
            judged_at(t0),
            t0,
            &[
                (8, Some(7)),
                (9, None),
                (11, Some(10)),
                (18, None),
                (22, None),
            ],
        );
        assert_eq!(
            graces,
            [
                8 * SECOND,
                8 * SECOND,
                8 * SECOND,
                8 * SECOND,
                Duration::ZERO
            ]
        );
    }

    #[test]
    fn stamps_from_a_clock_ahead_hold_verdicts_back_one_window_at_most() {
        let now = Ts::now();
        let hours_ahead = Duration::from_secs(2 * 3600);
        let ahead = SweepMemory {
            judged_at: Some(now.plus(hours_ahead)),
            written_off: hours_ahead,
            until: Some(now.plus(hours_ahead)),
        };
        let first = ahead.judge(Some(now.plus(SECOND)), WINDOW, now.plus(2 * SECOND));
        assert_eq!(first.next.judged_at, Some(now.plus(2 * SECOND)));
        assert_eq!(first.next.until, Some(now.plus(2 * SECOND + WINDOW)));
        let later = now.plus(2 * SECOND + WINDOW + SECOND);
        assert_eq!(first.next.judge(None, WINDOW, later).grace, Duration::ZERO);
        // A stretch the next round closes is reckoned from that round.
        let closed = first
            .next
            .judge(Some(now.plus(3 * SECOND)), WINDOW, now.plus(4 * SECOND));
        assert_eq!(closed.closed, Some(2 * SECOND));
    }

    #[test]
    fn trouble_before_any_judged_round_writes_off_a_window() {
        let empty = SweepMemory {
            judged_at: None,
            written_off: Duration::ZERO,
            until: None,
        };
        let now = Ts::now();
        assert_eq!(empty.judge(Some(now), WINDOW, now).grace, WINDOW);
        assert_eq!(empty.judge(None, WINDOW, now).grace, Duration::ZERO);
    }
}
