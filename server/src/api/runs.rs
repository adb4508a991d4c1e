//! `/api/v1/runs`: the runs search; `/api/v1/runs/{id}`: one attempt with
//! its event history, and its log.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::IntoResponse;
use domain::model::RunView;
use domain::search::{BulkCounts, BulkRequest, BulkResult, RunList, RunQuery};
use serde::Deserialize;

use super::error::parse_id;
use super::json_body::JsonBody;
use super::keyset;
use super::operator::Operator;
use super::strict_query::{Params, StrictQuery, paged};
use super::{ApiError, ApiResult, ApiState};
use domain::filter::run::{self as run_filter, RunFilter};
use domain::time::Ts;

/// The search's filter plus the page it wants.
#[derive(Debug, Deserialize)]
pub struct SearchQuery {
    #[serde(flatten)]
    filter: RunQuery,
    before: Option<String>,
    limit: Option<String>,
}

impl Params for SearchQuery {
    fn names() -> Vec<&'static str> {
        paged(RunQuery::PARAMS)
    }
}

/// `GET /api/v1/runs?status=&target=&plan=&replica=&actor=&error=&since=&until=&before=&limit=`
pub async fn search(
    State(state): State<ApiState>,
    StrictQuery(q): StrictQuery<SearchQuery>,
) -> ApiResult<Json<RunList>> {
    let filter = run_filter::parse(&q.filter, Ts::now().into())
        .map_err(|e| ApiError::invalid(e.field, e.message))?;
    let (before, limit) = keyset::page(q.before.as_deref(), q.limit.as_deref(), "a run")?;
    Ok(Json(state.store.run_search(&filter, before, limit).await?))
}

/// `GET /api/v1/runs/bulk?<filter>`: how many runs each bulk action
/// would change, to show before asking.
pub async fn bulk_counts(
    State(state): State<ApiState>,
    StrictQuery(q): StrictQuery<RunQuery>,
) -> ApiResult<Json<BulkCounts>> {
    let filter = bulk_filter(&q, "")?;
    Ok(Json(state.store.run_bulk_counts(&filter).await?))
}

/// `POST /api/v1/runs/bulk` `{"action", "filter", "expected"}`: the action
/// on every run the filter matches that it applies to, if they are
/// `expected` in number; otherwise 409 and nothing changes.
pub async fn bulk(
    State(state): State<ApiState>,
    Operator(who): Operator,
    JsonBody(request): JsonBody<BulkRequest>,
) -> ApiResult<Json<BulkResult>> {
    let filter = bulk_filter(&request.filter, "filter.")?;
    seen_count(request.expected)?;
    let result = state
        .store
        .run_bulk(
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
        "bulk action"
    );
    Ok(Json(result))
}

/// [`run_filter::parse_for_bulk`], its fields named as they were sent:
/// under `filter.` in a POST body (`prefix`), bare in a query string.
fn bulk_filter(q: &RunQuery, prefix: &str) -> ApiResult<RunFilter> {
    run_filter::parse_for_bulk(q, Ts::now().into()).map_err(|e| bad_bulk_filter(e, prefix))
}

/// A bulk action's filter that cannot be read, its field named as it was
/// sent: under `prefix` (`filter.` in a POST body), except the whole
/// `filter` (one that narrows nothing).
pub(super) fn bad_bulk_filter(e: domain::filter::BadFilter, prefix: &str) -> ApiError {
    let field = match e.field {
        "filter" => "filter".to_owned(),
        field => format!("{prefix}{field}"),
    };
    ApiError::invalid(&field, e.message)
}

pub async fn get(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> ApiResult<Json<RunView>> {
    let mut run = state.store.run_get(parse_id(&id, "run")?).await?;
    run.definition = crate::plan_export::task_definition(&*state.store, run.task_id).await?;
    Ok(Json(run))
}

pub async fn log(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    let text = state.store.run_log(parse_id(&id, "run")?).await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text))
}

/// A bulk action's `expected`: the number of runs the operator was shown.
pub(super) fn seen_count(expected: i64) -> ApiResult<()> {
    if expected < 0 {
        return Err(ApiError::invalid(
            "expected",
            "expected is the number of runs you were shown, not negative",
        ));
    }
    Ok(())
}
