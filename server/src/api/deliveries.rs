//! `GET /api/v1/deliveries?plan_id=&limit=`: webhook deliveries with every
//! attempt's status code and error, newest first.

use axum::Json;
use axum::extract::State;
use domain::model::DeliveryView;
use serde::Deserialize;

use super::error::parse_id;
use super::strict_query::{Params, StrictQuery};
use super::{ApiError, ApiResult, ApiState};

const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 500;

#[derive(Deserialize)]
pub struct ListQuery {
    plan_id: Option<String>,
    limit: Option<String>,
}

impl Params for ListQuery {
    fn names() -> Vec<&'static str> {
        vec!["plan_id", "limit"]
    }
}

pub async fn list(
    State(state): State<ApiState>,
    StrictQuery(q): StrictQuery<ListQuery>,
) -> ApiResult<Json<Vec<DeliveryView>>> {
    let plan_id = match q.plan_id.as_deref().filter(|p| !p.is_empty()) {
        None => None,
        Some(text) => {
            let id = parse_id(text, "plan").map_err(|_| {
                ApiError::invalid(
                    "plan_id",
                    format!("`{text}` is not a plan id (a positive integer)"),
                )
            })?;
            // An unknown plan is a 404, not an empty list.
            state.store.plan_get(id).await?;
            Some(id)
        }
    };
    let limit = match q.limit.as_deref().filter(|l| !l.is_empty()) {
        None => DEFAULT_LIMIT,
        Some(text) => text
            .parse::<i64>()
            .ok()
            .filter(|l| (1..=MAX_LIMIT).contains(l))
            .ok_or_else(|| {
                ApiError::invalid(
                    "limit",
                    format!("limit must be a whole number between 1 and {MAX_LIMIT}, not `{text}`"),
                )
            })?,
    };
    Ok(Json(state.store.delivery_list(plan_id, limit).await?))
}
