//! `/api/v1/plans`: submit, list, show, and the plan-wide actions.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use domain::definition::TaskDefinition;
use domain::model::{PlanList, PlanView};
use domain::search::PlanQuery;
use domain::views::Action;
use serde::Deserialize;

use super::error::parse_id;
use super::operator::Operator;
use super::strict_query::{Params, StrictQuery};
use super::{ApiError, ApiResult, ApiState};
use crate::store::{IdempotencyKey, Submitted};
use crate::{plan, plan_export};
use domain::time::Ts;

/// Plans per page when the client names no limit, and the most it may ask.
const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 500;

/// `POST /api/v1/plans` with a plan file as JSON, or YAML when the
/// Content-Type says so.
pub async fn submit(
    State(state): State<ApiState>,
    Operator(who): Operator,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<PlanView>)> {
    let new_plan = match super::yaml_body(&headers, &body)? {
        Some(text) => plan::parse_yaml(text)?,
        None => plan::parse_json(&body)?,
    };
    state.commands.check(&new_plan)?;
    let key = idempotency_key(&headers)?;
    let (status, id) = match key {
        None => (
            StatusCode::CREATED,
            state
                .store
                .plan_insert(&new_plan, (&who).into(), Ts::now())
                .await?,
        ),
        Some(key) => {
            let key = IdempotencyKey {
                key,
                body_sha256: hex_sha256(&body),
            };
            match state
                .store
                .plan_insert_keyed(&new_plan, (&who).into(), Ts::now(), &key)
                .await?
            {
                Submitted::Created(id) => (StatusCode::CREATED, id),
                // What the first submit made, as if this were it.
                Submitted::Replayed(id) => (StatusCode::OK, id),
                Submitted::KeyReused => {
                    return Err(ApiError::invalid(
                        IDEMPOTENCY_KEY,
                        "this Idempotency-Key came with a different plan document within the \
                         last 24 hours; send that document, or use a new key for this one",
                    ));
                }
            }
        }
    };
    Ok((status, Json(state.store.plan_get(id).await?)))
}

const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// The `Idempotency-Key` header, if sent: 1 to 255 visible ASCII characters.
fn idempotency_key(headers: &HeaderMap) -> ApiResult<Option<&str>> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let key = value
        .to_str()
        .ok()
        .filter(|k| (1..=255).contains(&k.len()) && k.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or_else(|| {
            ApiError::invalid(
                IDEMPOTENCY_KEY,
                "an Idempotency-Key is 1 to 255 visible ASCII characters (no spaces)",
            )
        })?;
    Ok(Some(key))
}

fn hex_sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[derive(Deserialize)]
pub struct ListQuery {
    status: Option<String>,
    /// Part of the plan name, any case.
    name: Option<String>,
    limit: Option<String>,
    offset: Option<String>,
}

impl Params for ListQuery {
    fn names() -> Vec<&'static str> {
        vec!["status", "name", "limit", "offset"]
    }
}

/// `GET /api/v1/plans?status=&name=&limit=&offset=`
pub async fn list(
    State(state): State<ApiState>,
    StrictQuery(q): StrictQuery<ListQuery>,
) -> ApiResult<Json<PlanList>> {
    let limit = number(q.limit.as_deref(), "limit", DEFAULT_LIMIT)?;
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(
            "limit",
            format!("limit must be between 1 and {MAX_LIMIT}"),
        ));
    }
    let offset = number(q.offset.as_deref(), "offset", 0)?;
    if offset < 0 {
        return Err(ApiError::invalid("offset", "offset must not be negative"));
    }
    let filter = domain::filter::plan::parse(&PlanQuery {
        status: q.status,
        name: q.name,
    })
    .map_err(|e| ApiError::invalid(e.field, e.message))?;
    Ok(Json(
        state
            .store
            .plan_list(filter.status, filter.name.as_deref(), limit, offset)
            .await?,
    ))
}

fn number(text: Option<&str>, field: &str, default: i64) -> ApiResult<i64> {
    match text.filter(|t| !t.is_empty()) {
        None => Ok(default),
        Some(t) => t.parse().map_err(|_| {
            ApiError::invalid(field, format!("{field} must be a whole number, not `{t}`"))
        }),
    }
}

/// `GET /api/v1/plans/{id}`
pub async fn get(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> ApiResult<Json<PlanView>> {
    let id = parse_id(&id, "plan")?;
    Ok(Json(state.store.plan_get(id).await?))
}

/// `POST /api/v1/plans/{id}/run`: start a plan submitted with `start: false`.
pub async fn run(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> ApiResult<Json<PlanView>> {
    super::act(&state, &who, Action::PlanRun, &id).await
}

/// `POST /api/v1/plans/{id}/retry`: new attempts for FAILED/CANCELED tasks.
pub async fn retry(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> ApiResult<Json<PlanView>> {
    super::act(&state, &who, Action::PlanRetry, &id).await
}

/// `POST /api/v1/plans/{id}/cancel`: cancel everything still live.
pub async fn cancel(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> ApiResult<Json<PlanView>> {
    super::act(&state, &who, Action::PlanCancel, &id).await
}

/// `POST /api/v1/plans/{id}/approve`: approve every task of the plan that
/// waits for approval.
pub async fn approve(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> ApiResult<Json<PlanView>> {
    super::act(&state, &who, Action::PlanApprove, &id).await
}

/// `POST /api/v1/plans/{id}/pause`: promote no new run of the plan.
pub async fn pause(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> ApiResult<Json<PlanView>> {
    super::act(&state, &who, Action::PlanPause, &id).await
}

/// `POST /api/v1/plans/{id}/resume`.
pub async fn resume(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> ApiResult<Json<PlanView>> {
    super::act(&state, &who, Action::PlanResume, &id).await
}

/// `GET /api/v1/plans/{id}/definition`: what each task runs and how, in
/// submit order, secrets hidden (`domain::definition`).
pub async fn definition(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<TaskDefinition>>> {
    let stored = state.store.plan_stored(parse_id(&id, "plan")?).await?;
    Ok(Json(
        stored.tasks.iter().map(plan_export::definition).collect(),
    ))
}

/// `?format=` of an export: `json` (the default) or `yaml`.
#[derive(Debug, Deserialize)]
pub struct ExportQuery {
    format: Option<String>,
}

impl Params for ExportQuery {
    fn names() -> Vec<&'static str> {
        vec!["format"]
    }
}

/// `GET /api/v1/plans/{id}/export[?format=yaml]`: the plan file that
/// submits this plan again. It holds the plan's secrets (environment
/// values, headers, webhook secrets), so only operators, who may submit
/// plans, may read it.
pub async fn export(
    State(state): State<ApiState>,
    Operator(who): Operator,
    Path(id): Path<String>,
    StrictQuery(q): StrictQuery<ExportQuery>,
) -> ApiResult<Response> {
    let yaml = match q.format.as_deref() {
        None | Some("json") => false,
        Some("yaml") => true,
        Some(other) => {
            return Err(ApiError::invalid(
                "format",
                format!("`{other}` is not an export format; use json or yaml"),
            ));
        }
    };
    let id = parse_id(&id, "plan")?;
    let stored = state
        .store
        .plan_export(id, (&who).into(), Ts::now())
        .await?;
    let document = plan_export::document(&stored);
    if !yaml {
        return Ok(Json(document).into_response());
    }
    let text = plan_export::yaml(&document)?;
    Ok(([(header::CONTENT_TYPE, "application/yaml")], text).into_response())
}
