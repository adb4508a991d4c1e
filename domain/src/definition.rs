//! What a task runs and how, as the plan page, the run page and the API
//! show it (`GET /api/v1/plans/{id}/definition`, a run's `definition`).
//!
//! Nothing secret is in it: an environment variable and a header show
//! their names only, an HTTP body its size, and a URL or an argument is
//! shown with the server's masking of passwords and `token=…`-like pairs.
//! The plan file itself, secrets included, is `GET …/export`, for
//! operators only.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One task's definition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskDefinition {
    pub task_id: i64,
    pub task_name: String,
    pub executor: ExecutorView,
    /// The hard deadline of one run.
    pub timeout_ms: i64,
    pub max_attempts: i64,
    /// The wait before each automatic retry, in order: empty when the task
    /// has one attempt.
    pub retry_backoff_ms: Vec<i64>,
    /// `None`: the replica's `BATON_HEARTBEAT_INTERVAL`.
    pub heartbeat_interval_ms: Option<i64>,
    /// `None`: the replica's default (docs/plan-format.md).
    pub heartbeat_timeout_ms: Option<i64>,
    pub run_at: Option<DateTime<Utc>>,
    pub node: Option<String>,
    /// How long a pinned run waits for its node; `None` with a `node`
    /// means never.
    pub reassign_after_ms: Option<i64>,
}

/// An executor's fields, secrets left out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ExecutorView {
    Command {
        argv: Vec<String>,
        env_names: Vec<String>,
        cwd: Option<String>,
    },
    Http {
        url: String,
        method: String,
        header_names: Vec<String>,
        /// The request body's size; its content is not shown.
        body_bytes: Option<usize>,
        /// Accepted statuses; empty means any 2xx.
        expect: Vec<u16>,
    },
    Sleep {
        duration_ms: i64,
    },
    /// A library user's own executor: only its kind is known here.
    Custom {
        name: String,
    },
}

impl ExecutorView {
    /// The executor's kind, as plan files name it.
    pub fn kind(&self) -> &str {
        match self {
            ExecutorView::Command { .. } => "command",
            ExecutorView::Http { .. } => "http",
            ExecutorView::Sleep { .. } => "sleep",
            ExecutorView::Custom { name } => name,
        }
    }
}

/// `ms` as plan files write durations (`90s`, `1h 30m`, `250ms`), as
/// humantime, which reads them, writes them.
pub fn duration_text(ms: i64) -> String {
    let ms = u64::try_from(ms).unwrap_or(0);
    humantime::format_duration(std::time::Duration::from_millis(ms)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_plan_files_write_them() {
        assert_eq!(duration_text(0), "0s");
        assert_eq!(duration_text(250), "250ms");
        assert_eq!(duration_text(90_000), "1m 30s");
        assert_eq!(duration_text(3_600_000), "1h");
        assert_eq!(duration_text(86_400_000 + 1_500), "1day 1s 500ms");
    }

    #[test]
    fn the_kind_is_tagged_in_json() {
        let view = ExecutorView::Sleep { duration_ms: 5 };
        assert_eq!(
            serde_json::to_string(&view).unwrap(),
            r#"{"kind":"sleep","duration_ms":5}"#
        );
        assert_eq!(view.kind(), "sleep");
    }
}
