//! A runs search's filter, checked once for the API, the dashboard and
//! `baton runs`: [`RunQuery`] (text as typed) becomes a [`RunFilter`], or a
//! [`BadFilter`] naming the field at fault.

use std::time::Duration;

use chrono::{Datelike, NaiveDate, NaiveDateTime, TimeZone, Utc};
use domain::model::RunStatus;
use domain::search::RunQuery;

use crate::store::Ts;

/// Longest text a filter field takes, in characters: far above any real
/// target, plan or replica name, and it keeps a pasted log out of the SQL.
pub const MAX_TEXT: usize = 200;

/// Longest "ago" a time filter takes: a hundred years.
const MAX_AGO: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Which runs a search returns: all of the set fields hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunFilter {
    pub status: Option<RunStatus>,
    /// Target names starting with this.
    pub target: Option<String>,
    /// Plan names containing this, any case.
    pub plan: Option<String>,
    pub replica: Option<String>,
    pub actor: Option<String>,
    /// FAILED or CANCELED runs whose error contains this, any case.
    pub error: Option<String>,
    /// Finished at or after.
    pub since: Option<Ts>,
    /// Finished before.
    pub until: Option<Ts>,
}

/// Why a filter was refused, and which field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct BadFilter {
    pub field: &'static str,
    pub message: String,
}

pub(crate) fn bad(field: &'static str, message: impl Into<String>) -> BadFilter {
    BadFilter {
        field,
        message: message.into(),
    }
}

/// Checks `q`; relative times count back from `now`.
pub fn parse(q: &RunQuery, now: Ts) -> Result<RunFilter, BadFilter> {
    let status = match text("status", &q.status)? {
        None => None,
        Some(s) => Some(RunStatus::parse(&s.to_ascii_uppercase()).ok_or_else(|| {
            let known: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
            bad(
                "status",
                format!("`{s}` is not a run status; use one of {}", known.join(", ")),
            )
        })?),
    };
    let (since, until) = window(&q.since, &q.until, now)?;
    Ok(RunFilter {
        status,
        target: text("target", &q.target)?,
        plan: text("plan", &q.plan)?,
        replica: text("replica", &q.replica)?,
        actor: text("actor", &q.actor)?,
        error: text("error", &q.error)?,
        since,
        until,
    })
}

/// [`parse`] for a bulk action, which also refuses a filter that narrows
/// nothing (field `filter`): nobody acts on every run there is by leaving
/// the form empty.
pub fn parse_for_bulk(q: &RunQuery, now: Ts) -> Result<RunFilter, BadFilter> {
    let filter = parse(q, now)?;
    if filter == RunFilter::default() {
        return Err(bad(
            "filter",
            "a bulk action needs a filter (status=FAILED, target=db/, …); an empty one would \
             match every run",
        ));
    }
    Ok(filter)
}

/// `since` and `until`, the first earlier than the second.
pub(crate) fn window(
    since: &Option<String>,
    until: &Option<String>,
    now: Ts,
) -> Result<(Option<Ts>, Option<Ts>), BadFilter> {
    let since = time("since", since, now)?;
    let until = time("until", until, now)?;
    if let (Some(since), Some(until)) = (since, until)
        && since >= until
    {
        return Err(bad(
            "until",
            format!("until ({until}) must be later than since ({since})"),
        ));
    }
    Ok((since, until))
}

/// A text field, trimmed; empty is unset. Control characters are refused:
/// PostgreSQL cannot store a NUL, and none belongs in a name.
pub(crate) fn text(
    field: &'static str,
    value: &Option<String>,
) -> Result<Option<String>, BadFilter> {
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
fn time(field: &'static str, value: &Option<String>, now: Ts) -> Result<Option<Ts>, BadFilter> {
    let at = any_time(field, value, now)?;
    // chrono reads signed years down to -262144; PostgreSQL's timestamps
    // end at 4713 BC and answered such a filter with a 500.
    if let Some(at) = at
        && !(1..=9999).contains(&at.0.year())
    {
        return Err(bad(field, format!("{at} is outside the years 1 to 9999")));
    }
    Ok(at)
}

fn any_time(field: &'static str, value: &Option<String>, now: Ts) -> Result<Option<Ts>, BadFilter> {
    let Some(value) = text(field, value)? else {
        return Ok(None);
    };
    if let Ok(ago) = humantime::parse_duration(&value) {
        if ago > MAX_AGO {
            return Err(bad(field, format!("`{value}` ago is more than 100 years")));
        }
        return Ok(Some(now.minus(ago)));
    }
    if let Ok(at) = chrono::DateTime::parse_from_rfc3339(&value) {
        return Ok(Some(Ts::from(at.with_timezone(&Utc))));
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
        Some(at) => Ok(Some(Ts::from(Utc.from_utc_datetime(&at)))),
        None => Err(bad(
            field,
            format!(
                "`{value}` is neither a time (2026-11-25T10:00, RFC 3339) nor a duration ago (1h, 7d)"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use domain::model::RunStatus;
    use domain::search::RunQuery;

    use super::{BadFilter, parse};
    use crate::store::Ts;

    fn refused(q: RunQuery) -> BadFilter {
        parse(&q, Ts::now()).expect_err("refused")
    }

    #[test]
    fn fields_are_trimmed_and_status_any_case() {
        let now = Ts::from_micros(1_800_000_000_000_000);
        let f = parse(
            &RunQuery {
                status: Some(" failed ".into()),
                target: Some(" db/ ".into()),
                since: Some("90m".into()),
                until: Some("2027-01-15T08:00".into()),
                plan: Some("".into()),
                ..RunQuery::default()
            },
            now,
        )
        .expect("valid");
        assert_eq!(f.status, Some(RunStatus::Failed));
        assert_eq!(f.target.as_deref(), Some("db/"));
        assert_eq!(f.plan, None);
        assert_eq!(f.since, Some(Ts::from_micros(now.micros() - 5_400_000_000)));
        assert_eq!(f.until.unwrap().to_string(), "2027-01-15T08:00:00.000000Z");
    }

    #[test]
    fn bad_values_name_their_field() {
        let e = refused(RunQuery {
            status: Some("LOST".into()),
            ..RunQuery::default()
        });
        assert_eq!(e.field, "status");
        assert!(e.message.contains("`LOST` is not a run status"), "{e}");
        let e = refused(RunQuery {
            since: Some("yesterday-ish".into()),
            ..RunQuery::default()
        });
        assert_eq!(e.field, "since");
        let e = refused(RunQuery {
            since: Some("1h".into()),
            until: Some("2h".into()),
            ..RunQuery::default()
        });
        assert_eq!(e.field, "until");
        let e = refused(RunQuery {
            actor: Some("a\0b".into()),
            ..RunQuery::default()
        });
        assert_eq!(e.field, "actor");
        let e = refused(RunQuery {
            error: Some("x".repeat(201)),
            ..RunQuery::default()
        });
        assert_eq!(
            (e.field, e.message.as_str()),
            ("error", "is 201 characters long; at most 200 are allowed")
        );
        let e = refused(RunQuery {
            until: Some("1000000y".into()),
            ..RunQuery::default()
        });
        assert_eq!(e.field, "until");
        for far in ["-5000-01-01", "0000-12-31"] {
            let e = refused(RunQuery {
                since: Some(far.into()),
                ..RunQuery::default()
            });
            assert_eq!(e.field, "since", "{far}");
            assert!(e.message.contains("outside the years 1 to 9999"), "{e}");
        }
    }
}
