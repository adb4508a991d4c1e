//! The searches' filters, read once for the API, the dashboard and the
//! CLI: a query (text as typed) becomes a filter, or a [`BadFilter`]
//! naming the field at fault. Text and times read alike in every search.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, SubsecRound, TimeDelta, TimeZone, Utc};

use crate::time::rfc3339;

pub mod audit;
pub mod plan;
pub mod run;

/// Longest text a filter field takes, in characters: far above any real
/// target, plan or replica name, and it keeps a pasted log out of the SQL.
pub const MAX_TEXT: usize = 200;

/// Longest "ago" a time filter takes: a hundred years.
const MAX_AGO: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Why a filter was refused, and which field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadFilter {
    pub field: &'static str,
    pub message: String,
}

pub fn bad(field: &'static str, message: impl Into<String>) -> BadFilter {
    BadFilter {
        field,
        message: message.into(),
    }
}

impl fmt::Display for BadFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for BadFilter {}

/// A point in time a filter names.
type Instant = DateTime<Utc>;

/// `since` and `until`, the first earlier than the second.
pub fn window(
    since: &Option<String>,
    until: &Option<String>,
    now: DateTime<Utc>,
) -> Result<(Option<Instant>, Option<Instant>), BadFilter> {
    let since = time("since", since, now)?;
    let until = time("until", until, now)?;
    if let (Some(since), Some(until)) = (since, until)
        && since >= until
    {
        return Err(bad(
            "until",
            format!(
                "until ({}) must be later than since ({})",
                rfc3339(until),
                rfc3339(since)
            ),
        ));
    }
    Ok((since, until))
}

/// A text field, trimmed; empty is unset. Control characters are refused:
/// PostgreSQL cannot store a NUL, and none belongs in a name.
pub fn text(field: &'static str, value: &Option<String>) -> Result<Option<String>, BadFilter> {
    let Some(value) = value.as_deref().map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let chars = value.chars().count();
    if chars > MAX_TEXT {
        return Err(bad(
            field,
            format!("is {chars} characters long; at most {MAX_TEXT} are allowed"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(bad(field, "must not contain control characters"));
    }
    Ok(Some(value.to_owned()))
}

/// A time: RFC 3339, a date and time in UTC (`2026-11-25T10:00`,
/// seconds optional, `T` or a space), a date (its midnight, UTC), or a
/// duration ago (`90m`, `1h 30m`, `7d`); in the years 1 to 9999.
fn time(
    field: &'static str,
    value: &Option<String>,
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, BadFilter> {
    let at = any_time(field, value, now)?;
    // chrono reads signed years down to -262144; PostgreSQL's timestamps
    // end at 4713 BC and answered such a filter with a 500.
    if let Some(at) = at
        && !(1..=9999).contains(&at.year())
    {
        return Err(bad(
            field,
            format!("{} is outside the years 1 to 9999", rfc3339(at)),
        ));
    }
    Ok(at)
}

fn any_time(
    field: &'static str,
    value: &Option<String>,
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, BadFilter> {
    let Some(value) = text(field, value)? else {
        return Ok(None);
    };
    if let Ok(ago) = humantime::parse_duration(&value) {
        if ago > MAX_AGO {
            return Err(bad(field, format!("`{value}` ago is more than 100 years")));
        }
        // Saturating: the year check below refuses what falls off.
        let at = TimeDelta::from_std(ago)
            .ok()
            .and_then(|ago| now.checked_sub_signed(ago))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        return Ok(Some(at.trunc_subsecs(6)));
    }
    if let Ok(at) = chrono::DateTime::parse_from_rfc3339(&value) {
        return Ok(Some(at.with_timezone(&Utc).trunc_subsecs(6)));
    }
    let naive = [
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
    ]
    .iter()
    .find_map(|f| NaiveDateTime::parse_from_str(&value, f).ok())
    .or_else(|| {
        NaiveDate::parse_from_str(&value, "%Y-%m-%d")
            .ok()
            .and_then(|d| d.and_hms_opt(0, 0, 0))
    });
    match naive {
        Some(at) => Ok(Some(Utc.from_utc_datetime(&at))),
        None => Err(bad(
            field,
            format!(
                "`{value}` is neither a time (2026-11-25T10:00, RFC 3339) nor a duration ago (1h, 7d)"
            ),
        )),
    }
}
