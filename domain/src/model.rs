//! The JSON view types Baton shows to the world.
//!
//! The REST API serialises exactly these, and the dashboard's server
//! functions return them, so the two can never disagree about a field. They
//! compile to wasm as well, so nothing here may touch the database.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Status of one task run (one attempt). See docs/design.md, "Status
/// model".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunStatus {
    /// Waiting for a gate; `waiting_cause` says which.
    Pending,
    /// Every gate passed; any eligible replica may claim it.
    Available,
    /// Claimed by exactly one replica and executing.
    Running,
    Done,
    Failed,
    Canceled,
}

impl RunStatus {
    pub const ALL: [RunStatus; 6] = [
        RunStatus::Pending,
        RunStatus::Available,
        RunStatus::Running,
        RunStatus::Done,
        RunStatus::Failed,
        RunStatus::Canceled,
    ];

    /// The spelling stored in the database and used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "PENDING",
            RunStatus::Available => "AVAILABLE",
            RunStatus::Running => "RUNNING",
            RunStatus::Done => "DONE",
            RunStatus::Failed => "FAILED",
            RunStatus::Canceled => "CANCELED",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// DONE, FAILED and CANCELED end a run; nothing moves it afterwards.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Done | RunStatus::Failed | RunStatus::Canceled
        )
    }

    /// AVAILABLE and RUNNING hold a target and count against a plan's limit.
    pub fn holds_slot(self) -> bool {
        matches!(self, RunStatus::Available | RunStatus::Running)
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Status of a task: the status of its latest run, or one of the two states
/// that have no run behind them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskStatus {
    NotStarted,
    Pending,
    Available,
    Running,
    Done,
    Failed,
    Canceled,
    /// An operator decided the task counts as complete without running it.
    Skipped,
}

impl TaskStatus {
    pub const ALL: [TaskStatus; 8] = [
        TaskStatus::NotStarted,
        TaskStatus::Pending,
        TaskStatus::Available,
        TaskStatus::Running,
        TaskStatus::Done,
        TaskStatus::Failed,
        TaskStatus::Canceled,
        TaskStatus::Skipped,
    ];

    /// The order of segments in progress bars: finished work first, then
    /// what is under way, then what has not begun.
    pub const PROGRESS_ORDER: [TaskStatus; 8] = [
        TaskStatus::Done,
        TaskStatus::Skipped,
        TaskStatus::Failed,
        TaskStatus::Canceled,
        TaskStatus::Running,
        TaskStatus::Available,
        TaskStatus::Pending,
        TaskStatus::NotStarted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::NotStarted => "NOT_STARTED",
            TaskStatus::Pending => "PENDING",
            TaskStatus::Available => "AVAILABLE",
            TaskStatus::Running => "RUNNING",
            TaskStatus::Done => "DONE",
            TaskStatus::Failed => "FAILED",
            TaskStatus::Canceled => "CANCELED",
            TaskStatus::Skipped => "SKIPPED",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// The task needs nothing more: DONE or SKIPPED.
    pub fn is_complete(self) -> bool {
        matches!(self, TaskStatus::Done | TaskStatus::Skipped)
    }

    /// A run of the task is waiting, ready or executing.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            TaskStatus::Pending | TaskStatus::Available | TaskStatus::Running
        )
    }
}

impl From<RunStatus> for TaskStatus {
    fn from(status: RunStatus) -> Self {
        match status {
            RunStatus::Pending => TaskStatus::Pending,
            RunStatus::Available => TaskStatus::Available,
            RunStatus::Running => TaskStatus::Running,
            RunStatus::Done => TaskStatus::Done,
            RunStatus::Failed => TaskStatus::Failed,
            RunStatus::Canceled => TaskStatus::Canceled,
        }
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Status of a plan, derived from its tasks' statuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PlanStatus {
    /// Some task has no run yet (submitted with `start: false`) and nothing
    /// is active.
    NotStarted,
    /// Some task is pending, ready or executing.
    Running,
    /// Nothing can move without an operator: every open task waits behind
    /// a FAILED or CANCELED task that nobody retried or skipped, or on one
    /// that does. A Retry or a Skip makes it RUNNING again. The FAILED
    /// filter includes it.
    Halted,
    /// A task failed and nothing is active any more.
    Failed,
    /// Every task is DONE or SKIPPED.
    Done,
    /// Nothing is active, none failed, and at least one task was cancelled.
    Canceled,
}

impl PlanStatus {
    pub const ALL: [PlanStatus; 6] = [
        PlanStatus::NotStarted,
        PlanStatus::Running,
        PlanStatus::Halted,
        PlanStatus::Failed,
        PlanStatus::Done,
        PlanStatus::Canceled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PlanStatus::NotStarted => "NOT_STARTED",
            PlanStatus::Running => "RUNNING",
            PlanStatus::Halted => "HALTED",
            PlanStatus::Failed => "FAILED",
            PlanStatus::Done => "DONE",
            PlanStatus::Canceled => "CANCELED",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Whether nothing more happens to the plan by itself: DONE, FAILED,
    /// CANCELED, or HALTED until an operator acts.
    pub fn is_settled(self) -> bool {
        !matches!(self, PlanStatus::Running | PlanStatus::NotStarted)
    }

    /// Derives a plan's status from how many of its tasks are in each
    /// status and how many of the PENDING ones cannot move by themselves.
    ///
    /// The store computes the same rule in SQL to filter plan lists; the
    /// conformance suite checks that the two agree.
    pub fn from_counts(counts: &BTreeMap<TaskStatus, i64>, stuck: Stuck) -> Self {
        let n = |s: TaskStatus| counts.get(&s).copied().unwrap_or(0);
        let pending = n(TaskStatus::Pending);
        let moving = pending - stuck.blocked - stuck.waiting
            + n(TaskStatus::Available)
            + n(TaskStatus::Running);
        // PENDING tasks that only wait on dependencies, with no halt
        // anywhere, are still on their way (as before any halt existed).
        if moving > 0 || (pending > 0 && stuck.blocked == 0) {
            PlanStatus::Running
        } else if stuck.blocked > 0 {
            PlanStatus::Halted
        } else if n(TaskStatus::NotStarted) > 0 {
            PlanStatus::NotStarted
        } else if n(TaskStatus::Failed) > 0 {
            PlanStatus::Failed
        } else if n(TaskStatus::Canceled) > 0 {
            PlanStatus::Canceled
        } else {
            PlanStatus::Done
        }
    }
}

/// What a waiting cause starts with when its run is halted behind a task
/// that ended FAILED or CANCELED and that nobody retried or skipped (a
/// version line's halt, or a dependency's). The store's SQL matches the
/// same text (the store's `blocked_like!`).
pub const BLOCKED_CAUSE: &str = "blocked: ";

/// A plan's PENDING tasks that cannot move by themselves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stuck {
    /// Halted behind a FAILED or CANCELED task: their waiting cause
    /// starts with [`BLOCKED_CAUSE`].
    pub blocked: i64,
    /// Waiting for a dependency to end, and not themselves blocked.
    pub waiting: i64,
}

impl Stuck {
    /// How one PENDING task counts: `held` while a dependency is open.
    pub fn add(&mut self, cause: Option<&str>, held: bool) {
        if cause.is_some_and(|c| c.starts_with(BLOCKED_CAUSE)) {
            self.blocked += 1;
        } else if held {
            self.waiting += 1;
        }
    }
}

impl fmt::Display for PlanStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One line of `GET /api/v1/plans`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanSummary {
    pub id: i64,
    pub name: String,
    pub status: PlanStatus,
    /// Number of tasks in each status; statuses with no task are left out.
    pub counts: BTreeMap<TaskStatus, i64>,
    /// How many PENDING tasks wait behind a FAILED or CANCELED task
    /// ("blocked: … — retry or skip it").
    #[serde(default)]
    pub blocked: i64,
    pub created_at: DateTime<Utc>,
}

/// A page of plans, newest first, and how many match in all.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanList {
    pub plans: Vec<PlanSummary>,
    pub total: i64,
}

/// `GET /api/v1/plans/{id}`: a plan with every task's current state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanView {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub status: PlanStatus,
    pub parallel_limit: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    /// The notification this phase has claimed, if any (a Retry clears it).
    pub notification: Option<NotificationView>,
    /// Who paused the plan, and when; no run of a paused plan is promoted.
    #[serde(default)]
    pub paused_by: Option<String>,
    #[serde(default)]
    pub paused_at: Option<DateTime<Utc>>,
    /// The plan's stages in order (empty when it has none).
    #[serde(default)]
    pub stages: Vec<StageView>,
    /// The schedule that made it, and the tick (none for a trigger).
    #[serde(default)]
    pub schedule_id: Option<i64>,
    #[serde(default)]
    pub schedule_tick_at: Option<DateTime<Utc>>,
    pub tasks: Vec<TaskView>,
}

/// One stage of a plan: its tasks depend on every task of the stage
/// before it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageView {
    pub name: String,
    /// `required` or `two-person` when the stage needs approval.
    #[serde(default)]
    pub approval: Option<String>,
}

/// `GET /api/v1/paused`: every brake on, for an incident.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PausedView {
    /// Paused plans, oldest pause first.
    pub plans: Vec<PausedPlan>,
    /// Paused targets, by name.
    pub targets: Vec<TargetView>,
}

/// A paused plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PausedPlan {
    pub id: i64,
    pub name: String,
    pub paused_by: String,
    pub paused_at: DateTime<Utc>,
}

/// `GET /api/v1/targets`: a target with live runs or operator settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetView {
    pub target: String,
    /// At most this many runs hold it at once; null = no limit.
    pub capacity: Option<i64>,
    pub paused_by: Option<String>,
    pub paused_at: Option<DateTime<Utc>>,
    /// Runs AVAILABLE or RUNNING on it, and the first of them.
    pub holding: i64,
    pub first_holder: Option<i64>,
    /// Whether an exclusive run holds it.
    pub held_exclusively: bool,
    /// Runs PENDING on it.
    pub waiting: i64,
    /// Its version line is halted: the smallest version that ended FAILED
    /// or CANCELED, neither retried nor skipped; larger versions wait.
    pub halted_by: Option<HaltedLine>,
}

/// Where a target's version line stopped ([`TargetView::halted_by`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HaltedLine {
    pub version: String,
    pub run_id: i64,
    pub status: RunStatus,
}

impl TargetView {
    /// A target with no runs and no settings.
    pub fn idle(target: String) -> TargetView {
        TargetView {
            target,
            capacity: None,
            paused_by: None,
            paused_at: None,
            holding: 0,
            first_holder: None,
            held_exclusively: false,
            waiting: 0,
            halted_by: None,
        }
    }
}

/// A plan's notification claim: which event was sent for this phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NotificationView {
    /// `PIPELINE_FAILED` or `PIPELINE_COMPLETED`.
    pub event: String,
    pub claimed_at: DateTime<Utc>,
}

/// `GET /api/v1/deliveries`: one notification sent to one destination.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeliveryView {
    pub id: i64,
    /// The `X-Baton-Delivery` header: the same on every attempt.
    pub delivery_key: String,
    pub plan_id: i64,
    pub event: String,
    pub url: String,
    /// `PENDING` (to send or retry), `DELIVERED`, or `FAILED` (gave up).
    pub state: String,
    pub created_at: DateTime<Utc>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub last_status_code: Option<i64>,
    pub last_error: Option<String>,
    pub attempts: Vec<DeliveryAttemptView>,
}

/// One POST of a delivery and how it went.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeliveryAttemptView {
    pub attempt: i64,
    pub replica_id: String,
    pub at: DateTime<Utc>,
    pub status_code: Option<i64>,
    pub error: Option<String>,
}

/// A task and what its latest run is doing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskView {
    pub id: i64,
    pub name: String,
    pub target: String,
    pub exclusive: bool,
    pub version: Option<String>,
    pub node: Option<String>,
    pub status: TaskStatus,
    /// Attempt number of the latest run (1 for the first).
    pub attempt: Option<i64>,
    pub run_id: Option<i64>,
    pub replica_id: Option<String>,
    /// Why the latest run is still PENDING; null otherwise.
    pub waiting_cause: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub error: Option<String>,
    /// Names of the tasks this one waits for, and of those waiting for it.
    #[serde(default)]
    pub depends_on: Vec<String>,
    #[serde(default)]
    pub dependents: Vec<String>,
    #[serde(default)]
    pub stage: Option<String>,
    /// `required` or `two-person` when the task needs approval.
    #[serde(default)]
    pub approval: Option<String>,
    #[serde(default)]
    pub approvers: Vec<String>,
    #[serde(default)]
    pub approved_by: Option<String>,
    #[serde(default)]
    pub approved_at: Option<DateTime<Utc>>,
    /// Who asked to cancel the RUNNING latest run, and when: it keeps its
    /// target until its replica confirms the kill ("canceling").
    #[serde(default)]
    pub cancel_requested_by: Option<String>,
    #[serde(default)]
    pub cancel_requested_at: Option<DateTime<Utc>>,
}

/// `GET /api/v1/runs/{id}`: one attempt with its event history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunView {
    pub id: i64,
    pub task_id: i64,
    pub plan_id: i64,
    pub task_name: String,
    pub target: String,
    pub attempt: i64,
    pub status: RunStatus,
    pub replica_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub run_at: Option<DateTime<Utc>>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub last_heartbeat_at: Option<DateTime<Utc>>,
    pub heartbeat_deadline: Option<DateTime<Utc>>,
    pub deadline: Option<DateTime<Utc>>,
    pub waiting_cause: Option<String>,
    /// Exit code of a command, or HTTP status of a request.
    pub result_code: Option<i64>,
    pub error: Option<String>,
    /// Who asked to cancel this RUNNING run, and when: it keeps its target
    /// until its replica confirms the kill ("canceling").
    #[serde(default)]
    pub cancel_requested_by: Option<String>,
    #[serde(default)]
    pub cancel_requested_at: Option<DateTime<Utc>>,
    pub events: Vec<EventView>,
    /// What the run's task runs and how, secrets hidden; filled where one
    /// run is shown (its page, `GET /api/v1/runs/{id}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<crate::definition::TaskDefinition>,
}

/// One status transition of a run, as recorded in the event history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventView {
    pub id: i64,
    pub run_id: i64,
    /// Null for the event that created the run.
    pub from: Option<RunStatus>,
    pub to: RunStatus,
    pub replica_id: Option<String>,
    /// Who caused it: `scheduler`, a replica id, or an operator's name.
    pub actor: String,
    pub at: DateTime<Utc>,
    pub detail: Option<String>,
}

/// What a heartbeat row belongs to: a replica (`baton serve`) or an agent
/// (`baton agent`, which runs tasks for the replicas over HTTP).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerKind {
    #[default]
    Replica,
    Agent,
}

impl WorkerKind {
    /// Told by the id, which Baton itself gives: agents' start with `a-`,
    /// replicas' with `r-`.
    pub fn of(worker_id: &str) -> Self {
        if worker_id.starts_with("a-") {
            WorkerKind::Agent
        } else {
            WorkerKind::Replica
        }
    }

    /// `replica` or `agent`, as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerKind::Replica => "replica",
            WorkerKind::Agent => "agent",
        }
    }
}

/// `GET /api/v1/replicas`: one running (or recently running) process, a
/// replica or an agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplicaView {
    pub replica_id: String,
    #[serde(default)]
    pub kind: WorkerKind,
    pub hostname: String,
    pub labels: Vec<String>,
    pub version: String,
    pub started_at: DateTime<Utc>,
    pub last_heartbeat: DateTime<Utc>,
    /// Its host's clock minus the database's, in milliseconds, at its last
    /// heartbeat. Baton keeps to the database's clock whatever this is;
    /// beyond [`CLOCK_SKEW_WARNING_MS`] the page says so.
    #[serde(default)]
    pub clock_skew_ms: i64,
    pub alive: bool,
    pub leader: bool,
    /// Runs this replica is executing now.
    pub running: i64,
    /// Set while an operator drains it (it takes no new run): since when.
    #[serde(default)]
    pub draining_since: Option<DateTime<Utc>>,
    /// Who drains it.
    #[serde(default)]
    pub draining_by: Option<String>,
}

impl ReplicaView {
    /// "clock 4.0 s ahead of the database", when its host's clock is off by
    /// more than [`CLOCK_SKEW_WARNING_MS`].
    pub fn clock_note(&self) -> Option<String> {
        clock_skew_is_notable(self.clock_skew_ms).then(|| {
            format!(
                "clock {} the database",
                describe_clock_skew(self.clock_skew_ms)
            )
        })
    }
}

/// A host clock further than this from the database's is worth an
/// operator's attention (Baton keeps to the database's clock; the host's
/// commands and logs do not).
pub const CLOCK_SKEW_WARNING_MS: u64 = 1000;

/// Whether a host clock's skew (milliseconds, either way) is beyond
/// [`CLOCK_SKEW_WARNING_MS`].
pub fn clock_skew_is_notable(skew_ms: i64) -> bool {
    skew_ms.unsigned_abs() > CLOCK_SKEW_WARNING_MS
}

/// "4.0 s ahead of", "2 h 1 min behind": a host clock's skew (host minus
/// database, in milliseconds) as an operator says it.
pub fn describe_clock_skew(skew_ms: i64) -> String {
    let way = if skew_ms > 0 { "ahead of" } else { "behind" };
    let ms = skew_ms.unsigned_abs();
    let size = if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else if ms < 3_600_000 {
        format!("{} min {} s", ms / 60_000, ms % 60_000 / 1000)
    } else {
        format!("{} h {} min", ms / 3_600_000, ms % 3_600_000 / 60_000)
    };
    format!("{size} {way}")
}

/// What a user may do (docs/design.md, "Authorization"): viewers see
/// everything; operators also submit plans and act on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Viewer,
    Operator,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
        }
    }

    pub fn may_act(self) -> bool {
        self == Role::Operator
    }
}

/// Who made a request, as the server established it. `name` is recorded as
/// the actor of every change the request makes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub name: String,
    pub role: Role,
    /// No users are configured: everyone who reaches the (loopback-only)
    /// server is this anonymous operator, and every page says so.
    pub open: bool,
    /// The client's IP address, as the server's socket saw it: recorded
    /// in the audit log with every change; never sent to the browser.
    #[serde(skip)]
    pub address: Option<String>,
    /// `X-Forwarded-For` as the client sent it, for the audit log only:
    /// anyone can send one, so nothing trusts it.
    #[serde(skip)]
    pub forwarded_for: Option<String>,
}

/// The body of every 4xx/5xx answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    /// Path of the offending input field, e.g. `tasks[2].timeout`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub field: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skews_read_as_an_operator_says_them() {
        assert_eq!(describe_clock_skew(4_000), "4.0 s ahead of");
        assert_eq!(describe_clock_skew(-1_240), "1.2 s behind");
        assert_eq!(describe_clock_skew(125_000), "2 min 5 s ahead of");
        assert_eq!(describe_clock_skew(-7_260_000), "2 h 1 min behind");
    }

    fn counts(pairs: &[(TaskStatus, i64)]) -> BTreeMap<TaskStatus, i64> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn plan_status_follows_its_tasks() {
        use TaskStatus::*;
        let cases = [
            (counts(&[(NotStarted, 3)]), PlanStatus::NotStarted),
            (counts(&[(Done, 1), (Running, 1)]), PlanStatus::Running),
            (counts(&[(Failed, 1), (Pending, 1)]), PlanStatus::Running),
            (counts(&[(Failed, 1), (Done, 2)]), PlanStatus::Failed),
            (counts(&[(Done, 2), (Skipped, 1)]), PlanStatus::Done),
            (counts(&[(Done, 2), (Canceled, 1)]), PlanStatus::Canceled),
            (
                counts(&[(Skipped, 1), (NotStarted, 1)]),
                PlanStatus::NotStarted,
            ),
            (counts(&[(Failed, 1), (Canceled, 1)]), PlanStatus::Failed),
        ];
        for (c, want) in cases {
            assert_eq!(PlanStatus::from_counts(&c, Stuck::default()), want, "{c:?}");
        }
        // PENDING tasks that cannot move: halted only with a blocked one
        // and nothing else moving.
        let stuck = |blocked, waiting| Stuck { blocked, waiting };
        let halted = [
            (
                counts(&[(Failed, 1), (Pending, 2)]),
                stuck(1, 1),
                PlanStatus::Halted,
            ),
            (
                counts(&[(Canceled, 1), (Pending, 1)]),
                stuck(1, 0),
                PlanStatus::Halted,
            ),
            (
                counts(&[(Failed, 1), (Pending, 2)]),
                stuck(1, 0),
                PlanStatus::Running,
            ),
            (
                counts(&[(Failed, 1), (Pending, 1), (Running, 1)]),
                stuck(1, 0),
                PlanStatus::Running,
            ),
            (
                counts(&[(Done, 1), (Pending, 1)]),
                stuck(0, 1),
                PlanStatus::Running,
            ),
            (
                counts(&[(Failed, 1), (Pending, 1), (NotStarted, 1)]),
                stuck(1, 0),
                PlanStatus::Halted,
            ),
        ];
        for (c, s, want) in halted {
            assert_eq!(PlanStatus::from_counts(&c, s), want, "{c:?} {s:?}");
        }
    }

    #[test]
    fn statuses_round_trip_through_their_spelling() {
        for s in RunStatus::ALL {
            assert_eq!(RunStatus::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{s}\""));
        }
        for s in TaskStatus::ALL {
            assert_eq!(TaskStatus::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{s}\""));
        }
    }
}

/// `GET /api/v1/schedules/{id}`: a schedule, when it fires next and what
/// its last ticks made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScheduleView {
    pub id: i64,
    pub name: String,
    pub cron: String,
    /// IANA name, e.g. `Europe/Berlin`.
    pub time_zone: String,
    /// The expression in words, with its zone.
    pub description: String,
    /// `skip`, `queue` or `allow`.
    pub overlap: String,
    /// `none`, `latest` or `all`; `catch_up_limit` with `all`.
    pub catch_up: String,
    pub catch_up_limit: Option<i64>,
    pub params: BTreeMap<String, String>,
    /// The plan template as stored (JSON, with its `${…}`).
    pub template: String,
    /// The next five ticks (none while paused).
    pub next_ticks: Vec<DateTime<Utc>>,
    pub paused_by: Option<String>,
    pub paused_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
    /// Its last ten plans, newest first.
    pub plans: Vec<ScheduledPlan>,
    /// Its last ten ticks, newest first, whatever they made.
    pub ticks: Vec<TickView>,
}

/// A plan a schedule made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScheduledPlan {
    pub id: i64,
    pub name: String,
    pub status: PlanStatus,
    /// The tick that made it; none for a trigger.
    pub tick_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// Waiting to start behind the schedule's previous plan.
    pub queued: bool,
}

/// What one tick of a schedule did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TickView {
    pub tick_at: DateTime<Utc>,
    /// `created`, `queued`, `skipped`, `missed` (a run of ticks passed
    /// over, starting here) or `failed`.
    pub outcome: String,
    pub plan_id: Option<i64>,
    pub detail: Option<String>,
    pub recorded_at: DateTime<Utc>,
    /// The replica that handled it.
    pub recorded_by: String,
}
