//! A refusal written for whoever reads it: a script gets JSON
//! `{"error"}`, the dashboard's server functions a `DashboardError` the
//! page shows, and a browser loading a page, or posting a dashboard form
//! without JavaScript, plain text it can display.

use app::error::DashboardError;
use axum::Json;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use domain::model::ErrorBody;

/// Who reads a refusal, and so in which form it is written.
#[derive(Clone, Copy, PartialEq)]
pub enum Audience {
    /// `/api/v1` and `/metrics`: JSON `{"error"}` for scripts.
    Api,
    /// The dashboard's server functions and live feeds called from a
    /// page: a `DashboardError` in JSON (a feed refused is never data).
    ServerFn,
    /// A server function's form posted without JavaScript: the browser
    /// shows the answer as a page.
    Form,
    /// Pages: a browser.
    Page,
}

impl Audience {
    pub fn of(request: &Request) -> Audience {
        let path = request.uri().path();
        if path.starts_with("/api/") || path == "/metrics" {
            Audience::Api
        } else if path.starts_with("/_fn/") || path.starts_with(app::components::feed::LIVE_PREFIX)
        {
            let wants_page = request
                .headers()
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|accept| accept.contains("text/html"));
            if wants_page {
                Audience::Form
            } else {
                Audience::ServerFn
            }
        } else {
            Audience::Page
        }
    }

    /// `status` with `message`, in this audience's form.
    pub fn refuse(self, status: StatusCode, message: String) -> Response {
        match self {
            Audience::Api => (
                status,
                Json(ErrorBody {
                    error: message,
                    field: None,
                }),
            )
                .into_response(),
            Audience::ServerFn => {
                // A refusal for want of a turn is the server being busy,
                // which the page shows as it shows a database that does
                // not answer; a body too large is the input's fault, shown
                // as an invalid plan is; the rest refuse the request itself.
                let error = match status {
                    StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => {
                        DashboardError::Unavailable(message)
                    }
                    StatusCode::PAYLOAD_TOO_LARGE => DashboardError::Invalid {
                        message,
                        field: None,
                    },
                    _ => DashboardError::Forbidden(message),
                };
                (status, Json(error)).into_response()
            }
            Audience::Form | Audience::Page => (status, message).into_response(),
        }
    }
}
