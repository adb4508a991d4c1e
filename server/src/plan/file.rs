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
    /// Ordered groups: every task of a stage depends on every task of the
    /// stage before it.
    #[serde(default)]
    pub stages: Vec<StageFile>,
    pub tasks: Vec<TaskFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StageFile {
    pub name: String,
    /// `required` or `two-person`: one approval releases the whole stage.
    #[serde(default)]
    pub approval: Option<String>,
    #[serde(default)]
    pub approvers: Option<Vec<String>>,
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
    /// Names of tasks of this plan that must be DONE or SKIPPED first.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// The name of one of the plan's `stages`.
    #[serde(default)]
    pub stage: Option<String>,
    /// `required` or `two-person`.
    #[serde(default)]
    pub approval: Option<String>,
    #[serde(default)]
    pub approvers: Option<Vec<String>>,
}

/// YAML reads `version: 42` as a number and `version: "0042"` as text; both
/// are accepted. Anything else YAML reads as a number (`1.10`, `0042`,
/// `1e3`) is refused with the fix, not kept as a number that has lost
/// what was written (`1.10` would become `1.1`, which sorts before `1.9`).
#[derive(Debug)]
pub(super) enum VersionText {
    Text(String),
    Integer(u64),
}

impl<'de> Deserialize<'de> for VersionText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(text) => Ok(VersionText::Text(text)),
            serde_json::Value::Number(n) if n.is_u64() => {
                Ok(VersionText::Integer(n.as_u64().unwrap_or_default()))
            }
            other => Err(serde::de::Error::custom(format!(
                "a version is text or a whole number, and YAML read this one as {other}; \
                 write it in quotes (version: \"1.10\", version: \"0042\") to keep it as written"
            ))),
        }
    }
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
