//! The plan file exactly as an operator writes it (JSON or YAML).
//!
//! Unknown fields are refused rather than ignored: a typo such as `timout`
//! must not silently fall back to the default.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PlanFile {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub parallel_limit: Option<i64>,
    #[serde(default)]
    pub start: Option<bool>,
    #[serde(default)]
    pub webhooks: Vec<WebhookFile>,
    pub tasks: Vec<TaskFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WebhookFile {
    pub url: String,
    #[serde(default)]
    pub secret: Option<crate::secret::Secret>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TaskFile {
    pub name: String,
    pub target: String,
    #[serde(default)]
    pub exclusive: Option<bool>,
    #[serde(default)]
    pub version: Option<VersionText>,
    #[serde(default)]
    pub run_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub timeout: Option<String>,
    #[serde(default)]
    pub max_attempts: Option<i64>,
    #[serde(default)]
    pub heartbeat_interval: Option<String>,
    #[serde(default)]
    pub heartbeat_timeout: Option<String>,
    /// A duration or `never`.
    #[serde(default)]
    pub reassign_after: Option<String>,
    #[serde(default)]
    pub command: Option<CommandFile>,
    #[serde(default)]
    pub http: Option<HttpFile>,
    #[serde(default)]
    pub sleep: Option<String>,
}

/// YAML reads `version: 42` as a number and `version: "0042"` as text; both
/// are accepted and kept as written.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum VersionText {
    Text(String),
    Integer(u64),
}

impl VersionText {
    pub fn into_string(self) -> String {
        match self {
            VersionText::Text(s) => s,
            VersionText::Integer(n) => n.to_string(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CommandFile {
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HttpFile {
    pub url: String,
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub expect: Vec<u16>,
}
