//! `/api/v1/audit`: who changed what, when and from where, newest first.
//! Any signed-in user may read it, viewers included: it holds names and
//! addresses of colleagues, not secrets.

use axum::Json;
use axum::extract::State;
use domain::audit::{AuditList, AuditQuery};
use serde::Deserialize;

use super::strict_query::{Params, StrictQuery, paged};
use super::{ApiError, ApiResult, ApiState, keyset};
use domain::filter::audit as audit_filter;
use domain::time::Ts;

#[derive(Debug, Deserialize)]
pub struct AuditSearch {
    #[serde(flatten)]
    filter: AuditQuery,
    before: Option<String>,
    limit: Option<String>,
}

impl Params for AuditSearch {
    fn names() -> Vec<&'static str> {
        paged(AuditQuery::PARAMS)
    }
}

/// `GET /api/v1/audit?actor=&action=&subject=&since=&until=&before=&limit=`
pub async fn list(
    State(state): State<ApiState>,
    StrictQuery(q): StrictQuery<AuditSearch>,
) -> ApiResult<Json<AuditList>> {
    let filter = audit_filter::parse(&q.filter, Ts::now().into())
        .map_err(|e| ApiError::invalid(e.field, e.message))?;
    let (before, limit) = keyset::page(q.before.as_deref(), q.limit.as_deref(), "an entry")?;
    Ok(Json(state.store.audit_list(&filter, before, limit).await?))
}
