//! `/api/v1/plans/bulk`: Retry, Cancel or Skip all on the runs of every
//! plan the plans list's filter matches, bound to the count the operator
//! saw, as `/api/v1/runs/bulk` is for a runs search.

use axum::Json;
use axum::extract::State;
use domain::search::PlanFilter;
use domain::search::{BulkResult, PlanBulkCounts, PlanBulkRequest, PlanQuery};

use super::json_body::JsonBody;
use super::operator::Operator;
use super::runs::{bad_bulk_filter, seen_count};
use super::strict_query::StrictQuery;
use super::{ApiResult, ApiState};
use domain::filter::plan as plan_filter;
use domain::time::Ts;

/// `GET /api/v1/plans/bulk?status=&name=`: how many runs, in how many
/// plans, each bulk action would change, to show before asking.
pub async fn counts(
    State(state): State<ApiState>,
    StrictQuery(q): StrictQuery<PlanQuery>,
) -> ApiResult<Json<PlanBulkCounts>> {
    let filter = bulk_filter(&q, "")?;
    Ok(Json(state.store.plan_bulk_counts(&filter).await?))
}

/// `POST /api/v1/plans/bulk` `{"action", "filter": {"status", "name"},
/// "expected"}`: the action on the runs of every plan the filter matches
/// that it applies to, if they are `expected` in number; otherwise 409
/// and nothing changes.
pub async fn bulk(
    State(state): State<ApiState>,
    Operator(who): Operator,
    JsonBody(request): JsonBody<PlanBulkRequest>,
) -> ApiResult<Json<BulkResult>> {
    let filter = bulk_filter(&request.filter, "filter.")?;
    seen_count(request.expected)?;
    let result = state
        .store
        .plan_bulk(
            &filter,
            request.action,
            request.expected,
            (&who).into(),
            Ts::now(),
        )
        .await?;
    tracing::info!(
        actor = %who.name,
        action = request.action.as_str(),
        changed = result.changed,
        "bulk action on plans"
    );
    Ok(Json(result))
}

/// [`plan_filter::parse_for_bulk`], its fields named as they were sent:
/// under `filter.` in a POST body (`prefix`), bare in a query string.
fn bulk_filter(q: &PlanQuery, prefix: &str) -> ApiResult<PlanFilter> {
    plan_filter::parse_for_bulk(q).map_err(|e| bad_bulk_filter(e, prefix))
}
