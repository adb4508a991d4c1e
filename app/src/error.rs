//! The one error type the dashboard's server functions return.
//!
//! It crosses the wire as JSON (and, after a form post without
//! JavaScript, inside the redirect URL), so pages can tell "not found"
//! from "not allowed now" and show a plan's validation error next to the
//! field it names.

use std::fmt;

use leptos::server_fn::codec::JsonEncoding;
use leptos::server_fn::error::{FromServerFnError, ServerFnErrorErr};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DashboardError {
    /// Input that cannot be accepted; `field` is its path, e.g.
    /// `tasks[2].timeout`.
    Invalid {
        message: String,
        field: Option<String>,
    },
    /// The plan, task or run does not exist.
    NotFound(String),
    /// The action does not apply to the current status.
    Conflict(String),
    /// The engine could not answer (database down); the server log has
    /// the details.
    Unavailable(String),
    /// The request never reached the engine (network, encoding).
    Transport(String),
    /// Not signed in, or the session has ended.
    Unauthenticated(String),
    /// Signed in, but the role does not allow this.
    Forbidden(String),
}

impl DashboardError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, DashboardError::NotFound(_))
    }
}

impl fmt::Display for DashboardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DashboardError::Invalid {
                message,
                field: Some(field),
            } => write!(f, "{field}: {message}"),
            DashboardError::Invalid { message, .. }
            | DashboardError::NotFound(message)
            | DashboardError::Conflict(message)
            | DashboardError::Unavailable(message)
            | DashboardError::Unauthenticated(message)
            | DashboardError::Forbidden(message) => f.write_str(message),
            DashboardError::Transport(message) => {
                write!(f, "could not reach the server: {message}")
            }
        }
    }
}

impl std::error::Error for DashboardError {}

/// A search's filter that cannot be read, named by its field (the
/// message says the field too, for pages that show it alone).
impl From<domain::filter::BadFilter> for DashboardError {
    fn from(e: domain::filter::BadFilter) -> Self {
        DashboardError::Invalid {
            message: e.to_string(),
            field: Some(e.field.to_owned()),
        }
    }
}

impl FromServerFnError for DashboardError {
    type Encoder = JsonEncoding;

    fn from_server_fn_error(value: ServerFnErrorErr) -> Self {
        DashboardError::Transport(value.to_string())
    }
}
