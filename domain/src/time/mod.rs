//! Time as Baton judges it: [`Ts`], one instant type for every rule and
//! both backends, and [`clock`], the one clock every replica reads it from
//! (the database's, docs/design.md "One clock").
//!
//! Both backends store a [`Ts`] natively (the `sqlx` feature,
//! [`storage`]): PostgreSQL keeps `TIMESTAMPTZ`, which operators can read
//! and query; SQLite has no time type, so it keeps Unix microseconds in an
//! `INTEGER`, which compares and adds with plain integer arithmetic
//! (deadlines are computed in SQL).

use std::fmt;

use chrono::{DateTime, SubsecRound, TimeDelta, Utc};

pub mod clock;
#[cfg(feature = "sqlx")]
mod storage;

/// A UTC instant with microsecond precision (what PostgreSQL keeps).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ts(pub DateTime<Utc>);

impl Ts {
    /// The current time on the database's clock ([`clock`]), in
    /// microseconds so that a value read back from either backend equals
    /// the value written.
    pub fn now() -> Self {
        Ts::from_micros(clock::now_micros())
    }

    pub fn from_micros(micros: i64) -> Self {
        Ts(DateTime::from_timestamp_micros(micros).unwrap_or_default())
    }

    pub fn micros(self) -> i64 {
        self.0.timestamp_micros()
    }

    /// `self + d`, saturating at the last representable instant: a
    /// duration from stored data must never panic a scheduler loop (a
    /// `reassign_after` of a million years once did, on every leader).
    pub fn plus(self, d: std::time::Duration) -> Self {
        TimeDelta::from_std(d)
            .ok()
            .and_then(|delta| self.0.checked_add_signed(delta))
            .map_or(Ts(DateTime::<Utc>::MAX_UTC), Ts)
    }

    /// `self - d`, saturating at the first representable instant.
    pub fn minus(self, d: std::time::Duration) -> Self {
        TimeDelta::from_std(d)
            .ok()
            .and_then(|delta| self.0.checked_sub_signed(delta))
            .map_or(Ts(DateTime::<Utc>::MIN_UTC), Ts)
    }

    /// `14:05:00Z`-style wall-clock time for waiting causes and details.
    pub fn clock(self) -> String {
        self.0.format("%H:%M:%SZ").to_string()
    }

    /// `2026-11-28 14:05:00Z`: a time that may not be today's.
    pub fn date_time(self) -> String {
        self.0.format("%Y-%m-%d %H:%M:%SZ").to_string()
    }
}

impl From<DateTime<Utc>> for Ts {
    fn from(value: DateTime<Utc>) -> Self {
        Ts(value.trunc_subsecs(6))
    }
}

impl From<Ts> for DateTime<Utc> {
    fn from(value: Ts) -> Self {
        value.0
    }
}

/// How Baton writes an instant for people and scripts (a `Ts`, a
/// search's resolved times, an audit entry): RFC 3339 in UTC to the
/// microsecond, which the time filters read back as the same instant.
pub fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

impl fmt::Display for Ts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&rfc3339(self.0))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_panicking() {
        let now = Ts::now();
        let forever = Duration::from_secs(u64::MAX);
        assert_eq!(now.plus(forever), Ts(DateTime::<Utc>::MAX_UTC));
        assert_eq!(now.minus(forever), Ts(DateTime::<Utc>::MIN_UTC));
        let year = Duration::from_secs(365 * 86_400);
        assert_eq!(now.plus(year).minus(year), now);
    }
}
