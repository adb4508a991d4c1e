//! JSON request bodies whose refusal names the field at fault.
//!
//! axum's `Json` answers a body that does not fit its type with a sentence
//! (made JSON by `json_errors`) but no `field`: a script could not tell
//! which of a bulk body's fields was wrong without parsing the prose.
//! [`JsonBody`] reads the same bodies and answers `{"error", "field"}`
//! like every other refusal of input.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use super::ApiError;

/// A request body of JSON read into `T`.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        let json = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| {
                let v = v.trim();
                v.eq_ignore_ascii_case("application/json") || v.ends_with("+json")
            });
        if !json {
            // As axum's `Json` answers it; `json_errors` makes it JSON.
            return Err((
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "send the body as JSON, with `Content-Type: application/json`",
            )
                .into_response());
        }
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        read(&bytes)
            .map(JsonBody)
            .map_err(IntoResponse::into_response)
    }
}

fn read<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        ApiError::Invalid {
            message: format!("the body cannot be read: {}", e.inner()),
            field: (path != "." && path != "?").then_some(path),
        }
    })?;
    de.end().map_err(|e| ApiError::Invalid {
        message: format!("the body cannot be read: {e}"),
        field: None,
    })?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        filter: Filter,
        action: String,
    }

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Filter {
        status: Option<String>,
    }

    fn refusal(text: &str) -> (String, Option<String>) {
        match read::<Body>(text.as_bytes()) {
            Err(ApiError::Invalid { message, field }) => (message, field),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_refusal_names_the_field_at_fault() {
        let (message, field) = refusal(r#"{"filter": {"stauts": "FAILED"}, "action": "retry"}"#);
        assert_eq!(field.as_deref(), Some("filter.stauts"));
        assert!(message.contains("unknown field `stauts`"), "{message}");
        let (_, field) = refusal(r#"{"filter": {"status": 7}, "action": "retry"}"#);
        assert_eq!(field.as_deref(), Some("filter.status"));
        let (message, field) = refusal(r#"{"filter": {}, "action": "retry"} trailing"#);
        assert_eq!(field, None);
        assert!(message.contains("trailing characters"), "{message}");
        let (message, field) = refusal("{not json");
        assert_eq!(field, None);
        assert!(message.starts_with("the body cannot be read"), "{message}");
        assert!(read::<Body>(br#"{"filter": {}, "action": "retry"}"#).is_ok());
    }
}
