//! A plan as it was submitted, read back from its rows: what the task
//! definitions on the pages and in the API are made of (secrets hidden,
//! `plan/export.rs`), and the plan file an operator exports to submit it
//! again. Only the plan's own rows are read, never its runs.

use domain::time::Ts;

/// The plan row's part of its file.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredPlanRow {
    pub name: String,
    pub description: String,
    pub parallel_limit: Option<i64>,
    /// JSON array of `plan::Webhook`.
    pub webhooks: String,
    /// JSON array of `plan::Stage`.
    pub stages: String,
    /// The file's `start`: false when the plan waited for an operator's
    /// Run (`plan.starts_on_submit`).
    pub starts_on_submit: bool,
}

/// One task as submitted.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredTask {
    pub id: i64,
    pub name: String,
    pub target: String,
    pub exclusive: bool,
    pub version: Option<String>,
    pub run_at: Option<Ts>,
    pub node: Option<String>,
    pub timeout_ms: i64,
    pub max_attempts: i64,
    pub heartbeat_interval_ms: Option<i64>,
    pub heartbeat_timeout_ms: Option<i64>,
    pub reassign_after_ms: Option<i64>,
    /// JSON: `plan::ExecutorSpec` (or a library user's own kind).
    pub executor: String,
    pub stage: Option<String>,
    /// `required` or `two-person`: the task's own approval or its stage's.
    pub approval: Option<String>,
    /// JSON array of names.
    pub approvers: Option<String>,
}

/// A plan, its tasks in submit order and every dependency edge (stage
/// edges included) as (task id, id of the task it waits for).
#[derive(Debug, Clone)]
pub struct StoredPlan {
    pub plan: StoredPlanRow,
    pub tasks: Vec<StoredTask>,
    pub edges: Vec<(i64, i64)>,
}

pub const PLAN: &str = "SELECT name, description, parallel_limit, webhooks, stages,
    starts_on_submit FROM plan WHERE id = $1";

macro_rules! task_columns {
    () => {
        "SELECT id, name, target, exclusive, version, run_at, node, timeout_ms, max_attempts,
            heartbeat_interval_ms, heartbeat_timeout_ms, reassign_after_ms, executor, stage,
            approval, approvers
        FROM task "
    };
}

/// The plan's tasks in the order they were submitted (ids only grow).
pub const TASKS: &str = concat!(task_columns!(), "WHERE plan_id = $1 ORDER BY id");

/// The tasks with the given ids (a page of a plan, a run's task), in id
/// order: `n` placeholders from `$1`.
pub fn tasks_by_id(n: usize) -> String {
    format!(
        "{}WHERE id IN ({}) ORDER BY id",
        task_columns!(),
        crate::store::engine::placeholders(1, n)
    )
}
