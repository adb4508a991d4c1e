//! Links into the runs search, from any page.

use domain::search::RunQuery;

/// A link to the runs matching `query`, from the newest.
pub fn runs_href(query: &RunQuery) -> String {
    match query.to_query_string(&[]) {
        q if q.is_empty() => "/runs".to_owned(),
        q => format!("/runs?{q}"),
    }
}

/// A link to the runs with one field set: `runs_with("target", "db/x")`.
pub fn runs_with(field: &str, value: &str) -> String {
    format!("/runs?{field}={}", domain::query::encode_value(value))
}
