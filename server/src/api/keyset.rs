//! The page a keyset-paged list asks for (`before`, `limit`), checked the
//! same way for every list that pages by id (runs, audit entries).

use super::{ApiError, ApiResult};

/// Items per page when the client names no limit, and the most it may ask.
const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 500;

/// `before` (an id from the previous page's `next_before`) and `limit` as
/// typed; `what` names the items in the refusal ("run", "entry").
pub fn page(
    before: Option<&str>,
    limit: Option<&str>,
    what: &str,
) -> ApiResult<(Option<i64>, i64)> {
    let limit = whole("limit", limit)?.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(
            "limit",
            format!("limit must be between 1 and {MAX_LIMIT}"),
        ));
    }
    let before = whole("before", before)?;
    if before.is_some_and(|b| b < 1) {
        return Err(ApiError::invalid(
            "before",
            format!("before is {what} id from `next_before`, a positive whole number"),
        ));
    }
    Ok((before, limit))
}

fn whole(field: &str, text: Option<&str>) -> ApiResult<Option<i64>> {
    match text.map(str::trim).filter(|t| !t.is_empty()) {
        None => Ok(None),
        Some(t) => t.parse().map(Some).map_err(|_| {
            ApiError::invalid(field, format!("{field} must be a whole number, not `{t}`"))
        }),
    }
}
