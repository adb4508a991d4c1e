//! The one place engine errors become HTTP answers. Database text never
//! reaches a client: it is logged, and the client gets a generic 500.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use domain::model::ErrorBody;

use crate::agent::protocol::LOCK_WAIT_HEADER;
use crate::plan::InvalidPlan;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Input that cannot be accepted, with the field at fault (422).
    #[error("{message}")]
    Invalid {
        message: String,
        field: Option<String>,
    },
    /// No credentials, or wrong ones (401).
    #[error("{0}")]
    Unauthenticated(String),
    /// The user's role does not allow this (403).
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    /// The action does not apply to the current status (409).
    #[error("{0}")]
    Conflict(String),
    #[error("service unavailable: {0}")]
    Unavailable(String),
    /// A heartbeat waited its bound for a lock another client holds
    /// (503, with [`LOCK_WAIT_HEADER`]): as good as written, since the
    /// sweeper waits for the same lock, and to be sent again at once
    /// (docs/design.md, "Liveness").
    #[error("held up by a lock another client holds on the database; send it again")]
    LockWait,
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl ApiError {
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        ApiError::Invalid {
            message: message.into(),
            field: Some(field.to_owned()),
        }
    }
}

impl From<InvalidPlan> for ApiError {
    fn from(e: InvalidPlan) -> Self {
        ApiError::Invalid {
            message: e.message,
            field: e.field,
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound { .. } => ApiError::NotFound(e.to_string()),
            StoreError::Conflict(message) => ApiError::Conflict(message),
            StoreError::Forbidden(message) => ApiError::Forbidden(message),
            StoreError::Invalid(message) => ApiError::Invalid {
                message,
                field: None,
            },
            other if other.is_lock_wait() => ApiError::LockWait,
            // Not the request's fault, nor a bug: a client or a load
            // balancer should try again (or another replica).
            other if other.is_unavailable() => {
                ApiError::Unavailable(format!("the database is unavailable: {other}"))
            }
            other => ApiError::Internal(other.into()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, field) = match &self {
            ApiError::Invalid { field, .. } => (StatusCode::UNPROCESSABLE_ENTITY, field.clone()),
            ApiError::Unauthenticated(_) => (StatusCode::UNAUTHORIZED, None),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, None),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, None),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, None),
            ApiError::Unavailable(_) | ApiError::LockWait => {
                (StatusCode::SERVICE_UNAVAILABLE, None)
            }
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, None),
        };
        let error = match &self {
            ApiError::Internal(e) => {
                tracing::error!(error = format!("{e:#}"), "request failed");
                "internal error; the server log has the details".to_owned()
            }
            other => other.to_string(),
        };
        let mut answer = (status, Json(ErrorBody { error, field })).into_response();
        if matches!(self, ApiError::LockWait) {
            answer.headers_mut().insert(
                LOCK_WAIT_HEADER,
                axum::http::HeaderValue::from_static("true"),
            );
        }
        answer
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// Parses an id from the path; axum's own rejection would not be JSON.
pub fn parse_id(text: &str, what: &str) -> ApiResult<i64> {
    text.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| {
            ApiError::invalid(
                "id",
                format!("`{text}` is not a {what} id (a positive integer)"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database that cannot be reached is 503, so a client or a load
    /// balancer tries again; it answered 500 while connections were being
    /// killed.
    #[test]
    fn an_unreachable_database_is_503_not_500() {
        for e in [
            sqlx::Error::PoolTimedOut,
            sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
        ] {
            let response = ApiError::from(StoreError::Database(e)).into_response();
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        }
        let bug = ApiError::from(StoreError::Corrupt("labels".into())).into_response();
        assert_eq!(bug.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
