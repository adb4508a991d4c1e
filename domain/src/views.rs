//! What each dashboard page loads in one round trip.
//!
//! Every payload carries the server's `now`, so relative times ("12 s ago")
//! are computed against the server clock: the server-rendered HTML and the
//! hydrated page agree, and a skewed browser clock cannot mislead.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::model::{
    DeliveryView, PlanList, PlanView, ReplicaView, RunStatus, RunView, ScheduleView, TargetView,
    TaskStatus, TaskView,
};

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
    /// What waits on an operator, most urgent kind first.
    pub attention: Vec<Attention>,
}

/// One item of the Overview's "needs attention" strip: something that
/// will not move without an operator, said plainly, with where to act.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attention {
    pub kind: AttentionKind,
    pub text: String,
    pub href: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionKind {
    /// A version line stopped behind a FAILED or CANCELED version.
    HaltedLine,
    /// Tasks waiting for someone's approval.
    Approval,
    PausedPlan,
    PausedTarget,
    /// A webhook given up after its last attempt.
    FailedDelivery,
}

impl AttentionKind {
    /// The spelling in the page's `data-kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            AttentionKind::HaltedLine => "halted_line",
            AttentionKind::Approval => "approval",
            AttentionKind::PausedPlan => "paused_plan",
            AttentionKind::PausedTarget => "paused_target",
            AttentionKind::FailedDelivery => "failed_delivery",
        }
    }
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
    /// The bulk action asked about (`confirm=`) and what it would change
    /// in the plans the filter matches.
    pub confirm: Option<(crate::search::BulkAction, crate::search::PlanBulkCount)>,
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
    /// Dependencies in the whole plan, those its stages imply included.
    pub dependencies: i64,
    /// Tasks of the whole plan (all pages) waiting for an approval.
    pub awaiting_approval: i64,
    /// Where to find the tasks the shown ones name that are on another
    /// page of the plan.
    pub elsewhere: BTreeMap<String, TaskPlace>,
    /// Shown tasks whose `depends_on` or `dependents` were cut to
    /// [`DEPENDENCY_NAMES`] names, with how many names each list held.
    pub cut: BTreeMap<i64, TieCounts>,
    /// What the shown tasks run and how (secrets hidden), in task order.
    #[serde(default)]
    pub definitions: Vec<crate::definition::TaskDefinition>,
}

/// Names a task row lists of what it runs after and before; the rest are
/// counted. A stage implies a dependency on every task of the stage before
/// it, so a row of a 10,000-task plan could otherwise name thousands.
pub const DEPENDENCY_NAMES: usize = 8;

/// The plan page draws the plan's graph up to this many tasks (all of
/// them on one page) ...
pub const GRAPH_MAX_TASKS: i64 = TASKS_PER_PAGE;
/// ... and this many dependencies.
pub const GRAPH_MAX_EDGES: i64 = 1_000;

/// Whether the plan page draws the graph of a plan of `tasks` tasks and
/// `dependencies` dependencies: only when there is something to draw and
/// it stays small. When it does, every task is shown and no list is cut.
pub fn graph_drawn(tasks: i64, dependencies: i64) -> bool {
    dependencies > 0 && tasks <= GRAPH_MAX_TASKS && dependencies <= GRAPH_MAX_EDGES
}

/// A task the plan page links to on another of its pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskPlace {
    pub id: i64,
    /// The page of the plan's tasks it is on (from 1).
    pub page: i64,
}

/// How many tasks one task runs after and before.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TieCounts {
    pub depends_on: usize,
    pub dependents: usize,
}

/// Whether the task's latest run is held for an approval nobody gave yet:
/// what the Approve buttons act on.
pub fn awaits_approval(task: &TaskView) -> bool {
    task.status == TaskStatus::Pending && task.approval.is_some() && task.approved_by.is_none()
}

/// `/targets`: every target with live runs or operator settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetsPage {
    pub now: DateTime<Utc>,
    pub targets: Vec<TargetView>,
}

/// `/schedules`: every schedule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SchedulesPage {
    pub now: DateTime<Utc>,
    pub schedules: Vec<ScheduleView>,
}

/// `/schedules/:id`: one schedule, and its file as the edit form shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SchedulePage {
    pub now: DateTime<Utc>,
    pub schedule: ScheduleView,
    /// The schedule as a file (JSON), to edit and save again.
    pub file: String,
}

/// What an operator does to a schedule from the dashboard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleAction {
    Pause,
    Resume,
    Trigger,
    Delete,
}

impl ScheduleAction {
    /// The spelling on the wire (serde's) and in forms.
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleAction::Pause => "pause",
            ScheduleAction::Resume => "resume",
            ScheduleAction::Trigger => "trigger",
            ScheduleAction::Delete => "delete",
        }
    }
}

/// `/runs`: one page of the runs search.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunsPage {
    pub now: DateTime<Utc>,
    pub list: crate::search::RunList,
    /// The filter as the server read it, relative times made absolute:
    /// what a bulk action carries, so it acts on the set that was shown.
    pub resolved: crate::search::RunQuery,
    /// The bulk action asked about (`confirm=`) and how many runs it
    /// would change.
    pub confirm: Option<(crate::search::BulkAction, i64)>,
}

/// `/audit`: one page of the audit log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditPage {
    pub now: DateTime<Utc>,
    pub list: crate::audit::AuditList,
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

/// The operator actions the dashboard offers (docs/design.md, "Operator
/// actions").
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

/// An operator's drain of a replica or agent, as the dashboard posts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerAction {
    Drain,
    Resume,
}

impl WorkerAction {
    pub const ALL: [WorkerAction; 2] = [WorkerAction::Drain, WorkerAction::Resume];

    /// The spelling on the wire (serde's) and in forms.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerAction::Drain => "drain",
            WorkerAction::Resume => "resume",
        }
    }

    /// What the result line says once the change went through.
    pub fn done_message(self, worker: &str) -> String {
        match self {
            WorkerAction::Drain => {
                format!("{worker} is draining: it takes no new run and finishes those it has.")
            }
            WorkerAction::Resume => format!("{worker} takes runs again."),
        }
    }
}

/// The target settings the dashboard's forms change, as posted: the
/// capacity travels as the text typed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetAction {
    Pause,
    Resume,
    Capacity,
}

impl TargetAction {
    pub const ALL: [TargetAction; 3] = [
        TargetAction::Pause,
        TargetAction::Resume,
        TargetAction::Capacity,
    ];

    /// The spelling on the wire (serde's) and in forms.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetAction::Pause => "pause",
            TargetAction::Resume => "resume",
            TargetAction::Capacity => "capacity",
        }
    }

    /// The change a form asks for; `capacity` is the capacity field as
    /// typed (empty removes the capacity), read only by
    /// [`TargetAction::Capacity`]. The error is what is wrong with the
    /// `capacity` field.
    pub fn change(self, capacity: Option<&str>) -> Result<TargetChange, String> {
        match self {
            TargetAction::Pause => Ok(TargetChange::Pause),
            TargetAction::Resume => Ok(TargetChange::Resume),
            TargetAction::Capacity => {
                let text = capacity.unwrap_or_default().trim();
                if text.is_empty() {
                    return Ok(TargetChange::Capacity(None));
                }
                text.parse::<i64>()
                    .map(|n| TargetChange::Capacity(Some(n)))
                    .map_err(|_| {
                        format!(
                            "must be a whole number of runs, or empty to remove it (got `{text}`)"
                        )
                    })
            }
        }
    }
}

/// An operator's change to one target (pause, resume, capacity), in every
/// plan at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TargetChange {
    Pause,
    Resume,
    /// At most this many runs hold the target at once; `None` removes the
    /// limit.
    Capacity(Option<i64>),
}

impl TargetChange {
    /// What the result line says once the change went through.
    pub fn done_message(self, target: &str) -> String {
        match self {
            TargetChange::Pause => {
                format!("Target {target} paused: no new run on it starts, in any plan.")
            }
            TargetChange::Resume => format!("Target {target} resumed."),
            TargetChange::Capacity(Some(n)) => {
                format!("Target {target} now takes at most {n} runs at once.")
            }
            TargetChange::Capacity(None) => format!("Target {target} has no capacity limit now."),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Action, TargetAction, TargetChange};

    #[test]
    fn actions_are_spelled_as_serde_spells_them() {
        for action in Action::ALL {
            let wire = serde_json::to_string(&action).unwrap();
            assert_eq!(wire, format!("\"{}\"", action.as_str()));
        }
    }

    #[test]
    fn worker_actions_are_spelled_as_serde_spells_them() {
        for action in super::WorkerAction::ALL {
            let wire = serde_json::to_string(&action).unwrap();
            assert_eq!(wire, format!("\"{}\"", action.as_str()));
        }
    }

    #[test]
    fn target_actions_are_spelled_as_serde_spells_them() {
        for action in TargetAction::ALL {
            let wire = serde_json::to_string(&action).unwrap();
            assert_eq!(wire, format!("\"{}\"", action.as_str()));
        }
    }

    #[test]
    fn a_capacity_is_read_as_typed_and_empty_removes_it() {
        let capacity = |text| TargetAction::Capacity.change(Some(text));
        assert_eq!(capacity(" 3 "), Ok(TargetChange::Capacity(Some(3))));
        assert_eq!(capacity(""), Ok(TargetChange::Capacity(None)));
        assert_eq!(
            TargetAction::Capacity.change(None),
            Ok(TargetChange::Capacity(None))
        );
        assert_eq!(
            capacity("two").unwrap_err(),
            "must be a whole number of runs, or empty to remove it (got `two`)"
        );
        assert_eq!(
            TargetAction::Pause.change(Some("junk")),
            Ok(TargetChange::Pause)
        );
    }
}
