//! `/api/v1/audit`: who changed what, when and from where, newest first.
//! Any signed-in user may read it, viewers included: it holds names and
//! addresses of colleagues, not secrets.

use app::audit::{AuditList, AuditQuery};
use axum::Json;
use axum::extract::{Query, State};
use serde::Deserialize;

use super::runs::whole;
use super::{ApiError, ApiResult, ApiState};
use crate::audit_filter;
use crate::store::Ts;

/// Entries per page when the client names no limit, and the most it may
/// ask.
const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 500;

#[derive(Debug, Deserialize)]
pub struct AuditSearch {
    #[serde(flatten)]
    filter: AuditQuery,
    before: Option<String>,
    limit: Option<String>,
}

/// `GET /api/v1/audit?actor=&action=&subject=&since=&until=&before=&limit=`
pub async fn list(
    State(state): State<ApiState>,
    Query(q): Query<AuditSearch>,
) -> ApiResult<Json<AuditList>> {
    let filter = audit_filter::parse(&q.filter, Ts::now())
        .map_err(|e| ApiError::invalid(e.field, e.message))?;
    let limit = whole("limit", q.limit.as_deref())?.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(
            "limit",
            format!("limit must be between 1 and {MAX_LIMIT}"),
        ));
    }
    let before = whole("before", q.before.as_deref())?;
    if before.is_some_and(|b| b < 1) {
        return Err(ApiError::invalid(
            "before",
            "before is an entry id from `next_before`, a positive whole number",
        ));
    }
    Ok(Json(state.store.audit_list(&filter, before, limit).await?))
}
