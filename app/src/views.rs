//! What each dashboard page loads in one round trip.
//!
//! Every payload carries the server's `now`, so relative times ("12 s ago")
//! are computed against the server clock: the server-rendered HTML and the
//! hydrated page agree, and a skewed browser clock cannot mislead.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::model::{DeliveryView, PlanList, PlanView, ReplicaView, RunStatus, RunView, TaskStatus};

/// `/`: what is happening now, and over the last hour.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Overview {
    pub now: DateTime<Utc>,
    /// PENDING, AVAILABLE and RUNNING runs right now.
    pub live: BTreeMap<RunStatus, i64>,
    /// DONE, FAILED and CANCELED runs that finished in the last hour.
    pub last_hour: BTreeMap<RunStatus, i64>,
    /// Runs finished per minute over the last hour, oldest minute first
    /// (60 entries, empty minutes included).
    pub per_minute: Vec<MinuteCount>,
    pub replicas: Vec<ReplicaView>,
    /// The latest FAILED runs, newest first.
    pub failures: Vec<FailureView>,
    /// The latest webhook deliveries, newest first.
    pub deliveries: Vec<DeliveryView>,
}

/// Runs that finished in one minute, by how they ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MinuteCount {
    pub minute: DateTime<Utc>,
    pub done: i64,
    pub failed: i64,
    pub canceled: i64,
}

impl MinuteCount {
    pub fn total(&self) -> i64 {
        self.done + self.failed + self.canceled
    }
}

/// A run that failed, with enough to find it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FailureView {
    pub run_id: i64,
    pub plan_id: i64,
    pub plan_name: String,
    pub task_name: String,
    pub target: String,
    pub attempt: i64,
    pub replica_id: Option<String>,
    pub finished_at: DateTime<Utc>,
    pub error: Option<String>,
}

/// `/plans`: one page of the plan list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlansPage {
    pub now: DateTime<Utc>,
    pub list: PlanList,
}

/// Tasks the plan page shows at once: a 10,000-task plan on one page was
/// 20 MB of HTML, refetched every 2 s by every open tab.
pub const TASKS_PER_PAGE: i64 = 200;

/// `/plans/:id`: the plan, one page of its tasks, and its notifications.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanPage {
    pub now: DateTime<Utc>,
    /// `plan.tasks` holds only this page's tasks.
    pub plan: PlanView,
    /// Every task of the plan counted by status (all pages).
    pub task_counts: BTreeMap<TaskStatus, i64>,
    /// Tasks in the plan, and the position of the first one shown.
    pub tasks_total: i64,
    pub tasks_offset: i64,
    /// This plan's webhook deliveries with their attempts, newest first.
    pub deliveries: Vec<DeliveryView>,
}

/// `/runs/:id`: the run, its history and the end of its log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunPage {
    pub now: DateTime<Utc>,
    pub run: RunView,
    pub log: LogTail,
}

/// The last lines of a run's log.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogTail {
    /// Oldest first.
    pub lines: Vec<LogLineView>,
    /// Lines the log holds in all (more than `lines.len()` when cut).
    pub total: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogLineView {
    pub at: DateTime<Utc>,
    /// `stdout` or `stderr`.
    pub stream: String,
    pub line: String,
}

/// `/replicas`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplicasPage {
    pub now: DateTime<Utc>,
    pub replicas: Vec<ReplicaView>,
}

/// `/deliveries`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeliveriesPage {
    pub now: DateTime<Utc>,
    pub deliveries: Vec<DeliveryView>,
}

/// The operator actions the dashboard offers (SPEC §6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    PlanRun,
    PlanRetry,
    PlanCancel,
    TaskRetry,
    TaskCancel,
    TaskSkip,
    TaskApprove,
    PlanApprove,
    PlanPause,
    PlanResume,
}

impl Action {
    pub const ALL: [Action; 10] = [
        Action::PlanRun,
        Action::PlanRetry,
        Action::PlanCancel,
        Action::TaskRetry,
        Action::TaskCancel,
        Action::TaskSkip,
        Action::TaskApprove,
        Action::PlanApprove,
        Action::PlanPause,
        Action::PlanResume,
    ];

    /// The spelling on the wire (serde's) and in forms: `task_retry`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::PlanRun => "plan_run",
            Action::PlanRetry => "plan_retry",
            Action::PlanCancel => "plan_cancel",
            Action::TaskRetry => "task_retry",
            Action::TaskCancel => "task_cancel",
            Action::TaskSkip => "task_skip",
            Action::TaskApprove => "task_approve",
            Action::PlanApprove => "plan_approve",
            Action::PlanPause => "plan_pause",
            Action::PlanResume => "plan_resume",
        }
    }

    /// What the result line says once the action went through.
    pub fn done_message(self, id: i64) -> String {
        match self {
            Action::PlanRun => format!("Plan {id} started."),
            Action::PlanRetry => format!("Failed and canceled tasks of plan {id} retried."),
            Action::PlanCancel => format!("Plan {id} canceled."),
            Action::TaskRetry => format!("Task {id} retried: a new attempt is pending."),
            Action::TaskCancel => format!("Task {id} canceled."),
            Action::TaskSkip => format!("Task {id} skipped."),
            Action::TaskApprove => format!("Task {id} approved."),
            Action::PlanApprove => {
                format!("Every task of plan {id} waiting for approval approved.")
            }
            Action::PlanPause => format!("Plan {id} paused: no new run of it starts."),
            Action::PlanResume => format!("Plan {id} resumed."),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Action;

    #[test]
    fn actions_are_spelled_as_serde_spells_them() {
        for action in Action::ALL {
            let wire = serde_json::to_string(&action).unwrap();
            assert_eq!(wire, format!("\"{}\"", action.as_str()));
        }
    }
}
