//! The plans list's filter, checked once for the list and its bulk
//! actions in the API, the dashboard and `baton status --act`: a
//! [`PlanQuery`] (text as typed) becomes a [`PlanFilter`], or a
//! [`BadFilter`] naming the field at fault. An action reads the fields as
//! the list does, so it acts on the plans the list showed.

use super::{BadFilter, bad, text};
use crate::model::PlanStatus;
use crate::search::{PlanFilter, PlanQuery};

/// Checks `q` as the plans list reads it: the status in any case, the
/// name trimmed; both may be unset.
pub fn parse(q: &PlanQuery) -> Result<PlanFilter, BadFilter> {
    let status = match text("status", &q.status)? {
        None => None,
        Some(s) => Some(PlanStatus::parse(&s.to_ascii_uppercase()).ok_or_else(|| {
            let known: Vec<&str> = PlanStatus::ALL.iter().map(|s| s.as_str()).collect();
            bad(
                "status",
                format!(
                    "`{s}` is not a plan status; use one of {}",
                    known.join(", ")
                ),
            )
        })?),
    };
    Ok(PlanFilter {
        status,
        name: text("name", &q.name)?,
    })
}

/// [`parse`] for a bulk action, which also refuses a filter that narrows
/// nothing (field `filter`): nobody acts on every plan there is by leaving
/// the form empty.
pub fn parse_for_bulk(q: &PlanQuery) -> Result<PlanFilter, BadFilter> {
    let filter = parse(q)?;
    if filter == PlanFilter::default() {
        return Err(bad(
            "filter",
            "a bulk action needs a filter (status=FAILED, name=orders, …); an empty one would \
             match every plan",
        ));
    }
    Ok(filter)
}

/// A filter as an audit entry names it: `plans status=FAILED name=orders`.
pub fn described(filter: &PlanFilter) -> String {
    let mut parts = vec!["plans".to_owned()];
    if let Some(status) = filter.status {
        parts.push(format!("status={}", status.as_str()));
    }
    if let Some(name) = &filter.name {
        parts.push(format!("name={name}"));
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use crate::model::PlanStatus;
    use crate::search::PlanQuery;

    use super::{described, parse_for_bulk};

    fn query(status: Option<&str>, name: Option<&str>) -> PlanQuery {
        PlanQuery {
            status: status.map(Into::into),
            name: name.map(Into::into),
        }
    }

    #[test]
    fn fields_are_read_as_the_list_reads_them() {
        let f = parse_for_bulk(&query(Some(" failed "), Some(" Orders "))).unwrap();
        assert_eq!(f.status, Some(PlanStatus::Failed));
        assert_eq!(f.name.as_deref(), Some("Orders"));
        assert_eq!(described(&f), "plans status=FAILED name=Orders");
        let f = parse_for_bulk(&query(None, Some("nightly"))).unwrap();
        assert_eq!(described(&f), "plans name=nightly");
    }

    #[test]
    fn an_empty_or_unreadable_filter_is_refused_naming_the_field() {
        for q in [query(None, None), query(Some(""), Some("  "))] {
            assert_eq!(parse_for_bulk(&q).unwrap_err().field, "filter");
        }
        let e = parse_for_bulk(&query(Some("LOST"), None)).unwrap_err();
        assert_eq!(e.field, "status");
        assert!(e.message.contains("`LOST` is not a plan status"), "{e}");
        let e = parse_for_bulk(&query(None, Some(&"x".repeat(201)))).unwrap_err();
        assert_eq!(e.field, "name");
    }
}
