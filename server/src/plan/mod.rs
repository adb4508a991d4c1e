//! Plan files: what an operator submits, and the validated form the store
//! accepts.
//!
//! Input arrives as JSON or YAML with the same fields ([`file`]); it is
//! parsed into a JSON value first so both formats share one deserialiser and
//! one set of field paths in error messages, then checked ([`validate`]) into
//! a [`NewPlan`] that can no longer be wrong.

mod command_policy;
mod file;
mod graph;
pub mod limits;
pub(crate) mod unique_keys;
mod validate;
mod version_order;
mod yaml_problem;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use command_policy::CommandPolicy;
pub(crate) use validate::name_text;
pub use validate::{parse_json, parse_text, parse_value, parse_yaml};
pub(crate) use yaml_problem::yaml_problem;

/// Why a plan file was refused, and which field is at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InvalidPlan {
    pub message: String,
    /// Path of the offending field, like `tasks[2].timeout`; `None` when the
    /// document as a whole is malformed.
    pub field: Option<String>,
}

/// A plan that passed validation, ready to be stored.
#[derive(Debug, Clone)]
pub struct NewPlan {
    pub name: String,
    pub description: String,
    pub parallel_limit: Option<i64>,
    /// Create PENDING runs at once (`start: true`) or leave the tasks
    /// NOT_STARTED until an operator runs the plan.
    pub start: bool,
    /// Where this plan's notifications go, besides `BATON_WEBHOOK_URL`.
    pub webhooks: Vec<Webhook>,
    /// The plan's stages in order, as the dashboard groups its tasks.
    pub stages: Vec<Stage>,
    pub tasks: Vec<NewTask>,
}

/// The fewest tasks a plan must have for a submit to admit any of its
/// runs (`store::engine::gates::admission`). Admission costs a submit a
/// fixed price (on PostgreSQL the promotion lock and a commit of its own,
/// two round trips more) and saves each run a write; for a handful of
/// runs the leader's round, which claims them for its own replica in the
/// same write, starts them sooner (docs/benchmarks.md).
pub const MIN_ADMITTED_RUNS: usize = 64;

/// The most distinct exclusive targets a plan may have for a submit to
/// admit any of its runs (`store::engine::gates::admission`): each of
/// its tasks is compared with all of them.
pub const MAX_ADMITTED_EXCLUSIVE_TARGETS: usize = 64;

impl NewPlan {
    /// Whether submitting it creates a PENDING run that carries a version
    /// (the only gate a new PENDING run can close on another run).
    pub fn starts_versioned_runs(&self) -> bool {
        self.start && self.tasks.iter().any(|t| t.version.is_some())
    }

    /// Whether any task uses a workflow gate that the store writes after
    /// the plan itself: dependencies (or stages) or an approval.
    pub fn has_workflow(&self) -> bool {
        self.tasks
            .iter()
            .any(|t| !t.depends_on.is_empty() || t.approval.is_some())
    }

    /// Whether a submit may admit its runs straight to AVAILABLE
    /// (docs/design.md, "Admission"): they start now, there are enough of
    /// them to pay for it, and no parallel limit or workflow gate needs
    /// the round. Which runs are admitted is the store's call, task by
    /// task.
    pub fn admits_runs(&self) -> bool {
        self.start
            && self.parallel_limit.is_none()
            && !self.writes_after_tasks()
            && self.tasks.len() >= MIN_ADMITTED_RUNS
            && self.exclusive_targets().len() <= MAX_ADMITTED_EXCLUSIVE_TARGETS
    }

    /// The targets of the plan's exclusive tasks, each once: a shared
    /// task on one of them is left to the round, which judges the plan's
    /// tasks on that target in their order.
    pub fn exclusive_targets(&self) -> Vec<&str> {
        let mut targets: Vec<&str> = self
            .tasks
            .iter()
            .filter(|t| t.exclusive)
            .map(|t| t.target.as_str())
            .collect();
        targets.sort_unstable();
        targets.dedup();
        targets
    }

    /// Whether the store writes more than the plan's own rows, after its
    /// tasks exist: dependencies, stages or approvals.
    pub fn writes_after_tasks(&self) -> bool {
        self.has_workflow() || !self.stages.is_empty()
    }

    /// Every dependency as (task index, index of the task it waits for).
    pub fn dependency_edges(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.tasks
            .iter()
            .enumerate()
            .flat_map(|(i, t)| t.depends_on.iter().map(move |&d| (i, d)))
    }
}

/// A named, ordered group of tasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    pub name: String,
    /// One approval of any task of the stage approves all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
}

/// Who must approve a task before it may start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// The approver must be someone other than the plan's submitter.
    pub two_person: bool,
    /// Only these users may approve; empty = any operator.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
}

impl Approval {
    /// How the `task.approval` column stores the kind.
    pub fn kind(&self) -> &'static str {
        if self.two_person {
            "two-person"
        } else {
            "required"
        }
    }
}

/// A notification destination named in the plan file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Webhook {
    pub url: String,
    /// Signs this destination's deliveries instead of `BATON_WEBHOOK_SECRET`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<crate::secret::Secret>,
}

/// One validated task of a [`NewPlan`].
#[derive(Debug, Clone)]
pub struct NewTask {
    pub name: String,
    pub target: String,
    pub exclusive: bool,
    pub version: Option<String>,
    pub run_at: Option<DateTime<Utc>>,
    pub node: Option<String>,
    pub timeout: Duration,
    pub max_attempts: i64,
    /// Per-run liveness; `None` takes the replica's default.
    pub heartbeat_interval: Option<Duration>,
    pub heartbeat_timeout: Option<Duration>,
    /// How long a pinned run waits for a live replica with its `node` label
    /// before any replica may run it; `None` = never.
    pub reassign_after: Option<Duration>,
    pub executor: ExecutorSpec,
    /// Indexes into the plan's `tasks` of what must be DONE or SKIPPED
    /// first: the task's own `depends_on` and its stage's predecessors.
    pub depends_on: Vec<usize>,
    pub stage: Option<String>,
    /// The task's own approval, or its stage's.
    pub approval: Option<Approval>,
}

/// What a task runs, for the three built-in executors. Stored as JSON
/// (`{"kind": "command", ...}`); a library user's own executor kinds use the
/// same column with their own fields, so executors receive the raw JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ExecutorSpec {
    Command(CommandSpec),
    Http(HttpSpec),
    Sleep {
        #[serde(with = "duration_ms")]
        duration: Duration,
    },
}

impl ExecutorSpec {
    pub fn kind(&self) -> &'static str {
        match self {
            ExecutorSpec::Command(_) => "command",
            ExecutorSpec::Http(_) => "http",
            ExecutorSpec::Sleep { .. } => "sleep",
        }
    }
}

/// Runs a program; exit code 0 is success.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandSpec {
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<String>,
}

/// Sends one HTTP request; success is a status listed in `expect`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HttpSpec {
    pub url: String,
    #[serde(default = "default_method")]
    pub method: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub body: Option<String>,
    /// Accepted statuses; empty means any 2xx.
    #[serde(default)]
    pub expect: Vec<u16>,
}

fn default_method() -> String {
    "GET".to_owned()
}

/// Durations inside stored executor specs are milliseconds.
mod duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}
