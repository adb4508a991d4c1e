//! A runs search's filter, checked once for the API, the dashboard and
//! `baton runs`: [`RunQuery`] (text as typed) becomes a [`RunFilter`], or a
//! [`BadFilter`] naming the field at fault.

use chrono::{DateTime, Utc};

use super::{BadFilter, bad, text, window};
use crate::model::RunStatus;
use crate::search::RunQuery;

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
    pub since: Option<DateTime<Utc>>,
    /// Finished before.
    pub until: Option<DateTime<Utc>>,
}

/// Checks `q`; relative times count back from `now`.
pub fn parse(q: &RunQuery, now: DateTime<Utc>) -> Result<RunFilter, BadFilter> {
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
pub fn parse_for_bulk(q: &RunQuery, now: DateTime<Utc>) -> Result<RunFilter, BadFilter> {
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

#[cfg(test)]
mod tests {
    use chrono::{DateTime, TimeDelta, Utc};

    use super::{BadFilter, parse};
    use crate::model::RunStatus;
    use crate::search::RunQuery;

    fn refused(q: RunQuery) -> BadFilter {
        parse(&q, Utc::now()).expect_err("refused")
    }

    #[test]
    fn fields_are_trimmed_and_status_any_case() {
        let now = DateTime::from_timestamp_micros(1_800_000_000_000_000).unwrap();
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
        assert_eq!(f.since, Some(now - TimeDelta::minutes(90)));
        assert_eq!(
            crate::time::rfc3339(f.until.unwrap()),
            "2027-01-15T08:00:00.000000Z"
        );
        // A time written back (a resolved search's `since`) reads as itself.
        let again = parse(
            &RunQuery {
                since: f.since.map(crate::time::rfc3339),
                ..RunQuery::default()
            },
            now,
        )
        .expect("its own text");
        assert_eq!(again.since, f.since);
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
