//! When a schedule fires: a cron expression read in an IANA time zone.
//!
//! croner does the calendar work, daylight-saving changes included (see
//! docs/schedules.md for what a skipped or repeated hour
//! does); this file only turns its answers into [`Ts`] and decides which
//! due ticks a round fires.

use std::collections::VecDeque;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};

use super::CatchUp;
use crate::plan::InvalidPlan;
use domain::time::Ts;

/// Ticks a round counts one by one when it reports what was missed;
/// past this it says "at least".
pub const MISSED_COUNT_LIMIT: u64 = 100_000;

/// The most fixed times of day (second × minute × hour combinations) an
/// expression is split into, each keeping the fixed-time rule on
/// daylight-saving days; past it the expression counts as an interval.
const MAX_FIXED_TIMES: usize = 64;

/// A parsed cron expression and its time zone.
#[derive(Debug, Clone)]
pub struct Timing {
    cron: Cron,
    /// The expression split into one pattern per fixed time of day, when
    /// its second, minute and hour fields name times (`0 2,14 * * *`,
    /// `0 9-17 * * 1-5`); empty when it is an interval (`*`, a step) or
    /// names one time only.
    ///
    /// croner applies the fixed-time rule (a skipped time fires once after
    /// the gap, a repeated one once, the first time) only to a single
    /// time: `0 2,14 * * *` fired twice on the fall-back day and lost 02:00
    /// on the spring-forward one. As in Vixie cron, only a `*` or a step
    /// makes an interval; each time of a list is fixed on its own.
    fixed_times: Vec<Cron>,
    zone: Tz,
}

/// What croner reads leniently and an operator did not mean: an empty
/// item (`1,,2`), and a step longer than its field (`*/1000` in minutes
/// fires only at minute 0, every hour, though croner describes it as
/// "every 1000 minutes").
fn check_fields(expr: &str) -> Result<(), InvalidPlan> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    const FIVE: [(&str, u32); 5] = [
        ("minute", 60),
        ("hour", 24),
        ("day-of-month", 31),
        ("month", 12),
        ("day-of-week", 7),
    ];
    let spans: Vec<(&str, u32)> = match fields.len() {
        5 => FIVE.to_vec(),
        6 => std::iter::once(("second", 60)).chain(FIVE).collect(),
        // Aliases (`@daily`) and wrong counts: croner's to judge.
        _ => return Ok(()),
    };
    let refuse = |message: String| InvalidPlan {
        message: format!("`{expr}`: {message}"),
        field: Some("cron".into()),
    };
    for (field, (name, span)) in fields.iter().zip(spans) {
        for item in field.split(',') {
            if item.is_empty() {
                return Err(refuse(format!(
                    "the {name} field has an empty item (`{field}`)"
                )));
            }
            let step = item
                .split_once('/')
                .and_then(|(_, s)| s.parse::<u32>().ok());
            if let Some(step) = step.filter(|&s| s > span) {
                return Err(refuse(format!(
                    "a step of {step} in the {name} field is longer than its {span} values, \
                     so it fires only at the first; write that value instead"
                )));
            }
        }
    }
    Ok(())
}

/// `cron` split into one pattern per fixed time of day (see
/// [`Timing::fixed_times`]).
fn split_fixed_times(cron: &Cron) -> Vec<Cron> {
    // croner's `ALL_BIT`: its component module is private, its fields not.
    const SET: u8 = 1;
    let p = &cron.pattern;
    let fixed = [&p.seconds, &p.minutes, &p.hours]
        .iter()
        .all(|c| c.step == 1 && !c.from_wildcard);
    if !fixed {
        return Vec::new();
    }
    let (seconds, minutes, hours) = (
        p.seconds.get_set_values(SET),
        p.minutes.get_set_values(SET),
        p.hours.get_set_values(SET),
    );
    let combinations = seconds.len() * minutes.len() * hours.len();
    if combinations <= 1 || combinations > MAX_FIXED_TIMES {
        return Vec::new();
    }
    // Leaves `keep` the only value of a component that held `all`.
    macro_rules! only {
        ($component:expr, $all:expr, $keep:expr) => {{
            for &v in $all {
                let _ = $component.unset_bit(v, SET);
            }
            let _ = $component.set_bit($keep, SET);
        }};
    }
    let mut out = Vec::with_capacity(combinations);
    for &h in &hours {
        for &m in &minutes {
            for &sec in &seconds {
                let mut one = cron.clone();
                only!(one.pattern.hours, &hours, h);
                only!(one.pattern.minutes, &minutes, m);
                only!(one.pattern.seconds, &seconds, sec);
                out.push(one);
            }
        }
    }
    out
}

impl Timing {
    /// Parses `expr` (five fields, or six with seconds first, or an alias
    /// such as `@daily`) in `zone` (`Europe/Berlin`, `UTC`).
    pub fn parse(expr: &str, zone: &str) -> Result<Timing, InvalidPlan> {
        if zone.trim().is_empty() {
            return Err(InvalidPlan {
                message: "time_zone is empty: name an IANA zone such as Europe/Berlin or UTC, \
                          or leave it out for UTC"
                    .into(),
                field: Some("time_zone".into()),
            });
        }
        let zone: Tz = zone.parse().map_err(|_| InvalidPlan {
            message: format!(
                "unknown time zone `{zone}`: use an IANA name such as Europe/Berlin or UTC"
            ),
            field: Some("time_zone".into()),
        })?;
        // croner also reads a seventh field, the year; a schedule with one
        // runs out of ticks, and its last one found the expression
        // refused as "never fires" when it came due, so made no plan.
        let fields = expr.split_whitespace().count();
        if fields > 6 {
            return Err(InvalidPlan {
                message: format!(
                    "`{expr}` has {fields} fields; a schedule takes five (minute hour \
                     day-of-month month day-of-week), or six with seconds first"
                ),
                field: Some("cron".into()),
            });
        }
        check_fields(expr)?;
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(expr)
            .map_err(|e| InvalidPlan {
                message: format!("`{expr}` is not a cron expression: {e}"),
                field: Some("cron".into()),
            })?;
        let timing = Timing {
            fixed_times: split_fixed_times(&cron),
            cron,
            zone,
        };
        // A pattern such as `0 0 30 2 *` parses but never fires.
        if timing.next_after(Ts::now()).is_none() {
            return Err(InvalidPlan {
                message: format!("`{expr}` never fires"),
                field: Some("cron".into()),
            });
        }
        Ok(timing)
    }

    pub fn zone(&self) -> Tz {
        self.zone
    }

    /// The patterns whose ticks together are the schedule's.
    fn patterns(&self) -> &[Cron] {
        match self.fixed_times.is_empty() {
            true => std::slice::from_ref(&self.cron),
            false => &self.fixed_times,
        }
    }

    /// The first tick strictly after `t`.
    pub fn next_after(&self, t: Ts) -> Option<Ts> {
        let local = self.local(t);
        self.patterns()
            .iter()
            .filter_map(|c| c.find_next_occurrence(&local, false).ok())
            .map(|at| Ts::from(at.with_timezone(&Utc)))
            .min()
    }

    /// The last tick at or before `t`.
    pub fn last_at_or_before(&self, t: Ts) -> Option<Ts> {
        self.previous(t, true)
    }

    /// The last tick before `t` (or at it, when `inclusive`).
    fn previous(&self, t: Ts, inclusive: bool) -> Option<Ts> {
        let local = self.local(t);
        self.patterns()
            .iter()
            .filter_map(|c| c.find_previous_occurrence(&local, inclusive).ok())
            .map(|at| Ts::from(at.with_timezone(&Utc)))
            .max()
    }

    /// The next `n` ticks after `t`.
    pub fn upcoming(&self, t: Ts, n: usize) -> Vec<Ts> {
        let mut out = Vec::with_capacity(n);
        let mut at = t;
        while out.len() < n {
            match self.next_after(at) {
                Some(next) => {
                    out.push(next);
                    at = next;
                }
                None => break,
            }
        }
        out
    }

    /// The expression in words, e.g. "At minute 30, at hour 2 (Europe/Berlin)".
    pub fn describe(&self) -> String {
        format!("{} ({})", self.cron.describe(), self.zone)
    }

    fn local(&self, t: Ts) -> DateTime<Tz> {
        t.0.with_timezone(&self.zone)
    }

    /// Which ticks in `[cursor, now]` a round fires, and where the cursor
    /// moves (the first tick after `now`). `cursor` must itself be a tick
    /// (it always comes from [`Timing::next_after`]): searching again
    /// from it would lose a tick that a daylight-saving gap moved, such as
    /// 02:30 fired at 03:00. Ticks more than `grace` before `now` were
    /// missed — no leader fired them in time — and `catch_up` says how
    /// many of the most recent of those still fire.
    pub fn due(&self, cursor: Ts, now: Ts, grace: Duration, catch_up: CatchUp) -> Due {
        if cursor > now {
            return Due {
                next: Some(cursor),
                ..Due::default()
            };
        }
        let late = now.minus(grace);
        let keep = catch_up.keeps();
        let mut due = Due::default();
        let mut kept: VecDeque<Ts> = VecDeque::new();
        let mut late_ticks = 0u64;
        let mut at = Some(cursor);
        while let Some(t) = at.filter(|&t| t < late) {
            if late_ticks == MISSED_COUNT_LIMIT {
                // A long outage of a frequent schedule: stop counting and
                // keep the most recent ticks before `late` instead.
                let mut recent = self.last_ticks_before(late, keep + 1, cursor);
                at = recent.last().and_then(|&newest| self.next_after(newest));
                if recent.len() > keep {
                    due.missed_to = Some(recent.remove(0));
                }
                kept = recent.into();
                due.missed_at_least = true;
                break;
            }
            late_ticks += 1;
            kept.push_back(t);
            if kept.len() > keep {
                let passed = kept.pop_front();
                due.missed_from = due.missed_from.or(passed);
                due.missed_to = passed;
            }
            at = self.next_after(t);
        }
        due.missed = late_ticks.saturating_sub(kept.len() as u64);
        due.fire.extend(kept);
        while let Some(t) = at.filter(|&t| t <= now) {
            due.fire.push(t);
            at = self.next_after(t);
        }
        due.next = at;
        due
    }

    /// Up to `n` ticks before `before`, none before `floor`, oldest first.
    fn last_ticks_before(&self, before: Ts, n: usize, floor: Ts) -> Vec<Ts> {
        let mut out = Vec::with_capacity(n);
        let mut at = before;
        while out.len() < n {
            match self.previous(at, false) {
                Some(t) if t >= floor => {
                    out.push(t);
                    at = t;
                }
                _ => break,
            }
        }
        out.reverse();
        out
    }
}

/// What one round does with one schedule's ticks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Due {
    /// Ticks to fire, oldest first.
    pub fire: Vec<Ts>,
    /// Ticks passed over for good (catch-up policy), and the first and
    /// last of them.
    pub missed: u64,
    pub missed_from: Option<Ts>,
    pub missed_to: Option<Ts>,
    /// `missed` is a lower bound: there were too many to count.
    pub missed_at_least: bool,
    /// The schedule's next tick (its new cursor); `None` if it never
    /// fires again.
    pub next: Option<Ts>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Ts {
        Ts(DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc))
    }

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn a_daily_0230_in_berlin_fires_once_on_both_dst_days() {
        let t = Timing::parse("30 2 * * *", "Europe/Berlin").unwrap();
        // Spring forward, 2026-03-29: 02:00 CET jumps to 03:00 CEST, so
        // 02:30 does not exist; it fires at 03:00 CEST (01:00Z), once.
        let ticks = t.upcoming(at("2026-03-28T12:00:00Z"), 3);
        let expected = [
            "2026-03-29T01:00:00Z",
            "2026-03-30T00:30:00Z",
            "2026-03-31T00:30:00Z",
        ];
        assert_eq!(ticks, expected.map(at));
        // A round fires that moved tick from the cursor (searching again
        // from 03:00 would find no 02:30 until the next day).
        let due = t.due(ticks[0], at("2026-03-29T01:00:05Z"), MIN, CatchUp::None);
        assert_eq!(due.fire, [ticks[0]]);
        assert_eq!(due.next, Some(ticks[1]));
        // Fall back, 2026-10-25: 02:30 happens twice; it fires at the
        // first (CEST, 00:30Z) only.
        let ticks = t.upcoming(at("2026-10-24T12:00:00Z"), 2);
        assert_eq!(
            ticks,
            [at("2026-10-25T00:30:00Z"), at("2026-10-26T01:30:00Z")]
        );
    }

    /// A list or range of times keeps the fixed-time rule for each of
    /// them, as one time does (it had fired 02:00 twice in the fall and
    /// not at all in the spring); a `*` or a step stays an interval.
    #[test]
    fn listed_times_fire_once_each_on_both_dst_days() {
        let fall = |expr: &str| {
            Timing::parse(expr, "Europe/Berlin")
                .unwrap()
                .upcoming(at("2027-10-30T21:00:00Z"), 3)
        };
        // 2027-10-31: 03:00 CEST falls back to 02:00 CET.
        assert_eq!(
            fall("0 2,14 * * *"),
            [
                "2027-10-31T00:00:00Z",
                "2027-10-31T13:00:00Z",
                "2027-11-01T01:00:00Z"
            ]
            .map(at)
        );
        assert_eq!(
            fall("0,30 2 * * *"),
            [
                "2027-10-31T00:00:00Z",
                "2027-10-31T00:30:00Z",
                "2027-11-01T01:00:00Z"
            ]
            .map(at)
        );
        assert_eq!(
            fall("0 2-3 * * *"),
            [
                "2027-10-31T00:00:00Z",
                "2027-10-31T02:00:00Z",
                "2027-11-01T01:00:00Z"
            ]
            .map(at)
        );
        // 2027-03-28: 02:00 CET jumps to 03:00 CEST; 02:00 and 02:30 fire
        // once each, at 03:00 CEST (01:00Z).
        let spring = |expr: &str| {
            Timing::parse(expr, "Europe/Berlin")
                .unwrap()
                .upcoming(at("2027-03-27T21:00:00Z"), 2)
        };
        assert_eq!(
            spring("0 2,14 * * *"),
            ["2027-03-28T01:00:00Z", "2027-03-28T12:00:00Z"].map(at)
        );
        assert_eq!(spring("0,30 2 * * *")[0], at("2027-03-28T01:00:00Z"));
        // An interval fires in both passes of the repeated hour.
        assert_eq!(
            fall("0 */1 * * *")[..3],
            [
                "2027-10-30T22:00:00Z",
                "2027-10-30T23:00:00Z",
                "2027-10-31T00:00:00Z"
            ]
            .map(at)
        );
        let t = Timing::parse("0 2,14 * * *", "Europe/Berlin").unwrap();
        assert_eq!(
            t.last_at_or_before(at("2027-10-31T12:00:00Z")),
            Some(at("2027-10-31T00:00:00Z"))
        );
    }

    #[test]
    fn lenient_readings_an_operator_did_not_mean_are_refused() {
        for (expr, zone, says) in [
            (
                "*/1000 * * * *",
                "UTC",
                "a step of 1000 in the minute field",
            ),
            ("0 */25 * * *", "UTC", "a step of 25 in the hour field"),
            ("1,,2 * * * *", "UTC", "the minute field has an empty item"),
            ("0 0 * * *", " ", "time_zone is empty"),
        ] {
            let e = Timing::parse(expr, zone).unwrap_err();
            assert!(e.message.contains(says), "{expr}: {}", e.message);
        }
        for expr in [
            "*/30 * * * *",
            "0 */24 * * *",
            "*/60 * * * * *",
            "@daily",
            "0 0 */31 * *",
        ] {
            Timing::parse(expr, "UTC").unwrap_or_else(|e| panic!("{expr}: {}", e.message));
        }
    }

    #[test]
    fn a_year_field_is_refused() {
        let e = Timing::parse("0 33 20 27 11 * 2099", "UTC").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("cron"));
        assert!(e.message.contains("has 7 fields"), "{}", e.message);
        Timing::parse("0 33 20 27 11 *", "UTC").unwrap();
    }

    #[test]
    fn due_ticks_on_time_fire_and_the_cursor_moves_past_now() {
        let t = Timing::parse("*/5 * * * *", "UTC").unwrap();
        let d = t.due(
            at("2026-01-01T10:00:00Z"),
            at("2026-01-01T10:00:30Z"),
            MIN,
            CatchUp::None,
        );
        assert_eq!(d.fire, [at("2026-01-01T10:00:00Z")]);
        assert_eq!((d.missed, d.next), (0, Some(at("2026-01-01T10:05:00Z"))));
        // Not due yet: nothing fires and the cursor stays.
        let d = t.due(
            at("2026-01-01T10:05:00Z"),
            at("2026-01-01T10:04:59Z"),
            MIN,
            CatchUp::None,
        );
        assert!(d.fire.is_empty());
        assert_eq!(d.next, Some(at("2026-01-01T10:05:00Z")));
    }

    #[test]
    fn catch_up_policies_after_an_outage() {
        let t = Timing::parse("0 * * * *", "UTC").unwrap();
        // No replica led from 10:00 to 15:20: ticks 10:00..15:00 are late.
        let (cursor, now) = (at("2026-01-01T10:00:00Z"), at("2026-01-01T15:20:00Z"));
        let none = t.due(cursor, now, MIN, CatchUp::None);
        assert!(none.fire.is_empty());
        assert_eq!(
            (none.missed, none.missed_from, none.missed_to),
            (6, Some(cursor), Some(at("2026-01-01T15:00:00Z")))
        );
        let latest = t.due(cursor, now, MIN, CatchUp::Latest);
        assert_eq!(
            (latest.fire.as_slice(), latest.missed),
            (&[at("2026-01-01T15:00:00Z")][..], 5)
        );
        let all = t.due(cursor, now, MIN, CatchUp::All { limit: 4 });
        assert_eq!(
            all.fire,
            ["12:00", "13:00", "14:00", "15:00"].map(|h| at(&format!("2026-01-01T{h}:00Z")))
        );
        assert_eq!(
            (all.missed, all.missed_to),
            (2, Some(at("2026-01-01T11:00:00Z")))
        );
        // A tick within the grace is on time, whatever the policy.
        let on_time = t.due(cursor, at("2026-01-01T10:00:40Z"), MIN, CatchUp::None);
        assert_eq!(on_time.fire, [cursor]);
    }

    #[test]
    fn a_long_outage_of_a_frequent_schedule_is_counted_with_a_bound() {
        let t = Timing::parse("* * * * * *", "UTC").unwrap();
        let (cursor, now) = (at("2026-01-01T00:00:00Z"), at("2026-01-03T00:00:00Z"));
        let d = t.due(cursor, now, MIN, CatchUp::All { limit: 3 });
        assert!(d.missed_at_least && d.missed >= MISSED_COUNT_LIMIT - 3);
        assert_eq!(
            d.fire.len(),
            3 + 61,
            "3 caught up, 61 on time (the grace, both ends)"
        );
        assert_eq!(d.fire[2], at("2026-01-02T23:58:59Z"));
    }
}
