//! `/api/v1/runs/{id}`: one attempt with its event history, and its log.

use app::model::RunView;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::IntoResponse;

use super::error::parse_id;
use super::{ApiResult, ApiState};

pub async fn get(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> ApiResult<Json<RunView>> {
    Ok(Json(state.store.run_get(parse_id(&id, "run")?).await?))
}

pub async fn log(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    let text = state.store.run_log(parse_id(&id, "run")?).await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text))
}
