//! Row types and the read queries whose SQL is the same on both backends
//! (both accept `$n` placeholders), with their conversion into the JSON
//! views of `domain::model`.

use std::collections::BTreeMap;

use domain::model::{
    EventView, PlanStatus, PlanView, RunStatus, RunView, Stuck, TaskStatus, TaskView,
};

use crate::store::{ReplicaInfo, ReplicaRecord, Result, StoreError};
use domain::time::Ts;

/// A task's status as SQL: skipped, never run, or its latest run's status.
/// Used by plan pages and lists; must match `TaskStatus` derivation.
macro_rules! task_status_sql {
    () => {
        "CASE WHEN t.skipped_at IS NOT NULL THEN 'SKIPPED' \
              WHEN r.id IS NULL THEN 'NOT_STARTED' ELSE r.status END"
    };
}
pub(crate) use task_status_sql;

/// A run's heartbeat timeout in ms, from its task `t` and the replica
/// default, the parameter `$default` names: the task's own, else the
/// default stretched to twice the task's heartbeat interval so a
/// slow-beating task is not swept between beats.
macro_rules! heartbeat_timeout_sql {
    ($default:literal) => {
        concat!(
            "COALESCE(t.heartbeat_timeout_ms, CASE WHEN t.heartbeat_interval_ms * 2 > ",
            $default,
            " THEN t.heartbeat_interval_ms * 2 ELSE ",
            $default,
            " END)"
        )
    };
}
pub(crate) use heartbeat_timeout_sql;

/// The status a run leaving RUNNING ends with: an operator asked to
/// cancel it (`$run.cancel_requested_by`), so it ends CANCELED, unless its
/// execution succeeded before the kill — work that happened is recorded as
/// DONE, never offered for a retry (docs/design.md, "Operator actions").
macro_rules! cancel_status_sql {
    ($status:literal, $run:literal) => {
        concat!(
            "CASE WHEN ",
            $run,
            ".cancel_requested_by IS NOT NULL AND ",
            $status,
            " <> 'DONE' THEN 'CANCELED' ELSE ",
            $status,
            " END"
        )
    };
}
pub(crate) use cancel_status_sql;

/// The error that goes with [`cancel_status_sql`]: who canceled the run,
/// then (`$why`, SQL text or `''`) what ended it, instead of `$error`.
macro_rules! cancel_error_sql {
    ($status:literal, $run:literal, $error:literal, $why:literal) => {
        concat!(
            "CASE WHEN ",
            $run,
            ".cancel_requested_by IS NOT NULL AND ",
            $status,
            " <> 'DONE' THEN 'canceled by ' || ",
            $run,
            ".cancel_requested_by || ",
            $why,
            " ELSE ",
            $error,
            " END"
        )
    };
}
pub(crate) use cancel_error_sql;

/// Plan page: the plan row.
pub const PLAN_GET: &str = "SELECT id, name, description, parallel_limit, created_at, created_by,
        paused_by, paused_at, stages, schedule_id, schedule_tick_at
    FROM plan WHERE id = $1";

/// Plan page: every task with its latest run.
pub const PLAN_TASKS: &str = concat!(
    "SELECT t.id, t.name, t.target, t.exclusive, t.version, t.node, ",
    task_status_sql!(),
    " AS status, r.attempt, r.id AS run_id, r.replica_id, r.waiting_cause, r.started_at,
       r.finished_at, r.error, t.stage, t.approval, t.approvers, t.approved_by, t.approved_at,
       t.has_dependents, r.cancel_requested_by, r.cancel_requested_at, r.held
     FROM task t LEFT JOIN task_run r ON r.id = t.latest_run_id
     WHERE t.plan_id = $1 ORDER BY t.id"
);

/// [`domain::model::BLOCKED_CAUSE`] as a `LIKE` pattern: a PENDING run
/// halted behind a task that ended FAILED or CANCELED.
macro_rules! blocked_like {
    () => {
        "'blocked: %'"
    };
}
pub(crate) use blocked_like;

/// Two columns of a task's latest run `r`, 1 or 0, that count what
/// [`domain::model::Stuck`] counts: `blocked` (PENDING behind a FAILED or
/// CANCELED task) and `waiting` (PENDING for an open dependency, not
/// blocked).
macro_rules! stuck_columns_sql {
    () => {
        concat!(
            "CASE WHEN r.status = 'PENDING' AND r.waiting_cause LIKE ",
            $crate::store::engine::reads::rows::blocked_like!(),
            " THEN 1 ELSE 0 END AS blocked,
            CASE WHEN r.status = 'PENDING' AND r.held
                AND COALESCE(r.waiting_cause, '') NOT LIKE ",
            $crate::store::engine::reads::rows::blocked_like!(),
            " THEN 1 ELSE 0 END AS waiting"
        )
    };
}
pub(crate) use stuck_columns_sql;

/// Run page: the run and its task's name.
pub const RUN_GET: &str =
    "SELECT r.id, r.task_id, r.plan_id, t.name AS task_name, r.target, r.attempt,
        r.status, r.replica_id, r.created_at, r.run_at, r.started_at, r.finished_at,
        r.last_heartbeat_at, r.heartbeat_deadline, r.deadline, r.waiting_cause, r.result_code,
        r.error, r.cancel_requested_by, r.cancel_requested_at
    FROM task_run r JOIN task t ON t.id = r.task_id WHERE r.id = $1";

/// Run log download.
pub const RUN_LOG: &str = "SELECT stream, line FROM run_log WHERE run_id = $1 ORDER BY id";

/// Does a run exist (to tell an empty log from a missing run)?
pub const RUN_EXISTS: &str = "SELECT COUNT(*) FROM task_run WHERE id = $1";

/// The later of the stamp `$row` and the one `$beside` recorded while
/// another client held the row (NULL when none was): a replica's last
/// heartbeat and a run's heartbeat deadline, wherever they are judged.
macro_rules! later_stamp_sql {
    ($row:literal, $beside:literal) => {
        concat!(
            "CASE WHEN ",
            $beside,
            " > ",
            $row,
            " THEN ",
            $beside,
            " ELSE ",
            $row,
            " END"
        )
    };
}
pub(crate) use later_stamp_sql;

/// Each replica and how many runs it executes now, for the replicas page
/// and for the node gate and the pins of AVAILABLE runs
/// (`engine::gates::node_labels`). Its last heartbeat is the later of its
/// row's and the one recorded beside the row while another client held it
/// (`held_replica_heartbeat`), as the sweeper judges it
/// (`engine::liveness`): a replica alive behind a held row keeps its
/// labels.
///
/// The RUNNING runs are counted in one pass, grouped by replica. Counted
/// per replica, every replica's count read all of them again (on
/// PostgreSQL, every run the claim log lists): with 4 replicas and 4,000
/// running runs, 18 ms against 7 (docs/benchmarks.md, "Replicas page").
pub const REPLICA_LIST: &str = concat!(
    "SELECT p.replica_id, p.hostname, p.labels, p.version, p.started_at, ",
    later_stamp_sql!("p.last_heartbeat", "h.at"),
    " AS last_heartbeat, p.clock_skew_ms, p.draining_since, p.draining_by,
        COALESCE(c.running, 0) AS running
    FROM replica p LEFT JOIN held_replica_heartbeat h ON h.replica_id = p.replica_id
    LEFT JOIN (SELECT replica_id, COUNT(*) AS running FROM running_run GROUP BY replica_id) c
        ON c.replica_id = p.replica_id
    ORDER BY p.started_at, p.replica_id"
);

#[derive(sqlx::FromRow)]
pub struct NotificationRow {
    pub event: String,
    pub claimed_at: Ts,
}

#[derive(sqlx::FromRow)]
pub struct PlanRow {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub parallel_limit: Option<i64>,
    pub created_at: Ts,
    pub created_by: String,
    pub paused_by: Option<String>,
    pub paused_at: Option<Ts>,
    /// JSON: `[{"name", "approval"}]`.
    pub stages: String,
    pub schedule_id: Option<i64>,
    pub schedule_tick_at: Option<Ts>,
}

#[derive(sqlx::FromRow)]
pub struct TaskRow {
    pub id: i64,
    pub name: String,
    pub target: String,
    pub exclusive: bool,
    pub version: Option<String>,
    pub node: Option<String>,
    pub status: String,
    pub attempt: Option<i64>,
    pub run_id: Option<i64>,
    pub replica_id: Option<String>,
    pub waiting_cause: Option<String>,
    pub started_at: Option<Ts>,
    pub finished_at: Option<Ts>,
    pub error: Option<String>,
    pub stage: Option<String>,
    pub approval: Option<String>,
    /// JSON array of names.
    pub approvers: Option<String>,
    pub approved_by: Option<String>,
    pub approved_at: Option<Ts>,
    /// Some task depends on this one: set once, at submit.
    pub has_dependents: bool,
    pub cancel_requested_by: Option<String>,
    pub cancel_requested_at: Option<Ts>,
    /// The latest run waits for an open dependency.
    pub held: Option<bool>,
}

#[derive(sqlx::FromRow)]
pub struct RunRow {
    pub id: i64,
    pub task_id: i64,
    pub plan_id: i64,
    pub task_name: String,
    pub target: String,
    pub attempt: i64,
    pub status: String,
    pub replica_id: Option<String>,
    pub created_at: Ts,
    pub run_at: Option<Ts>,
    pub started_at: Option<Ts>,
    pub finished_at: Option<Ts>,
    pub last_heartbeat_at: Option<Ts>,
    pub heartbeat_deadline: Option<Ts>,
    pub deadline: Option<Ts>,
    pub waiting_cause: Option<String>,
    pub result_code: Option<i64>,
    pub error: Option<String>,
    pub cancel_requested_by: Option<String>,
    pub cancel_requested_at: Option<Ts>,
}

#[derive(sqlx::FromRow)]
pub struct EventRow {
    pub id: i64,
    pub run_id: i64,
    pub from_status: Option<String>,
    pub to_status: String,
    pub replica_id: Option<String>,
    pub actor: String,
    pub at: Ts,
    pub detail: Option<String>,
}

#[derive(sqlx::FromRow)]
pub struct LogRow {
    pub stream: String,
    pub line: String,
}

#[derive(sqlx::FromRow)]
pub struct ReplicaRow {
    pub replica_id: String,
    pub hostname: String,
    pub labels: String,
    pub version: String,
    pub started_at: Ts,
    pub last_heartbeat: Ts,
    pub clock_skew_ms: i64,
    pub draining_since: Option<Ts>,
    pub draining_by: Option<String>,
    pub running: i64,
}

pub fn run_status(text: &str) -> Result<RunStatus> {
    RunStatus::parse(text)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown run status {text:?}")))
}

fn task_status(text: &str) -> Result<TaskStatus> {
    TaskStatus::parse(text)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown task status {text:?}")))
}

fn time(ts: Option<Ts>) -> Option<chrono::DateTime<chrono::Utc>> {
    ts.map(|t| t.0)
}

pub fn plan_view(
    plan: PlanRow,
    tasks: Vec<TaskRow>,
    notification: Option<NotificationRow>,
) -> Result<PlanView> {
    let mut stuck = Stuck::default();
    for t in tasks.iter().filter(|t| t.status == "PENDING") {
        stuck.add(t.waiting_cause.as_deref(), t.held.unwrap_or(false));
    }
    let tasks = tasks
        .into_iter()
        .map(|t| {
            Ok(TaskView {
                id: t.id,
                name: t.name,
                target: t.target,
                exclusive: t.exclusive,
                version: t.version,
                node: t.node,
                status: task_status(&t.status)?,
                attempt: t.attempt,
                run_id: t.run_id,
                replica_id: t.replica_id,
                waiting_cause: t.waiting_cause,
                started_at: time(t.started_at),
                finished_at: time(t.finished_at),
                error: t.error,
                depends_on: Vec::new(),
                dependents: Vec::new(),
                stage: t.stage,
                approval: t.approval,
                approvers: t
                    .approvers
                    .as_deref()
                    .and_then(|a| serde_json::from_str(a).ok())
                    .unwrap_or_default(),
                approved_by: t.approved_by,
                approved_at: time(t.approved_at),
                cancel_requested_by: t.cancel_requested_by,
                cancel_requested_at: time(t.cancel_requested_at),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut counts = BTreeMap::new();
    for t in &tasks {
        *counts.entry(t.status).or_insert(0) += 1;
    }
    Ok(PlanView {
        id: plan.id,
        name: plan.name,
        description: plan.description,
        status: PlanStatus::from_counts(&counts, stuck),
        parallel_limit: plan.parallel_limit,
        created_at: plan.created_at.0,
        created_by: plan.created_by,
        notification: notification.map(|n| domain::model::NotificationView {
            event: n.event,
            claimed_at: n.claimed_at.0,
        }),
        paused_by: plan.paused_by,
        paused_at: time(plan.paused_at),
        stages: stage_views(&plan.stages),
        schedule_id: plan.schedule_id,
        schedule_tick_at: time(plan.schedule_tick_at),
        tasks,
    })
}

/// The stored stages as the views show them.
fn stage_views(json: &str) -> Vec<domain::model::StageView> {
    let stages: Vec<crate::plan::Stage> = serde_json::from_str(json).unwrap_or_default();
    stages
        .into_iter()
        .map(|s| domain::model::StageView {
            name: s.name,
            approval: s.approval.map(|a| a.kind().to_owned()),
        })
        .collect()
}

/// Plan page: the plan's dependencies, as task ids.
pub const PLAN_DEPENDENCIES: &str = "SELECT e.task_id, e.depends_on FROM task_dependency e
    JOIN task t ON t.id = e.task_id WHERE t.plan_id = $1 ORDER BY e.task_id, e.depends_on";

/// Fills each task's `depends_on` and `dependents` with names.
pub fn with_dependencies(view: &mut PlanView, edges: &[(i64, i64)]) {
    let names: std::collections::HashMap<i64, String> =
        view.tasks.iter().map(|t| (t.id, t.name.clone())).collect();
    let index: std::collections::HashMap<i64, usize> = view
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id, i))
        .collect();
    for (task, dep) in edges {
        if let (Some(&ti), Some(&di)) = (index.get(task), index.get(dep)) {
            view.tasks[ti].depends_on.push(names[dep].clone());
            view.tasks[di].dependents.push(names[task].clone());
        }
    }
}

pub fn event_view(e: EventRow) -> Result<EventView> {
    Ok(EventView {
        id: e.id,
        run_id: e.run_id,
        from: e.from_status.as_deref().map(run_status).transpose()?,
        to: run_status(&e.to_status)?,
        replica_id: e.replica_id,
        actor: e.actor,
        at: e.at.0,
        detail: e.detail,
    })
}

pub fn run_view(r: RunRow, events: Vec<EventRow>) -> Result<RunView> {
    Ok(RunView {
        id: r.id,
        task_id: r.task_id,
        plan_id: r.plan_id,
        task_name: r.task_name,
        target: r.target,
        attempt: r.attempt,
        status: run_status(&r.status)?,
        replica_id: r.replica_id,
        created_at: r.created_at.0,
        run_at: time(r.run_at),
        started_at: time(r.started_at),
        finished_at: time(r.finished_at),
        last_heartbeat_at: time(r.last_heartbeat_at),
        heartbeat_deadline: time(r.heartbeat_deadline),
        deadline: time(r.deadline),
        waiting_cause: r.waiting_cause,
        result_code: r.result_code,
        error: r.error,
        cancel_requested_by: r.cancel_requested_by,
        cancel_requested_at: time(r.cancel_requested_at),
        events: events.into_iter().map(event_view).collect::<Result<_>>()?,
        definition: None,
    })
}

pub fn log_text(lines: Vec<LogRow>) -> String {
    let mut out = String::new();
    for l in lines {
        if l.stream == "stderr" {
            out.push_str("[stderr] ");
        }
        out.push_str(&l.line);
        out.push('\n');
    }
    out
}

pub fn replica_record(r: ReplicaRow) -> Result<ReplicaRecord> {
    let labels = serde_json::from_str(&r.labels)
        .map_err(|e| StoreError::Corrupt(format!("labels of replica {}: {e}", r.replica_id)))?;
    Ok(ReplicaRecord {
        info: ReplicaInfo {
            replica_id: r.replica_id,
            hostname: r.hostname,
            labels,
            version: r.version,
            started_at: r.started_at,
        },
        last_heartbeat: r.last_heartbeat,
        clock_skew_ms: r.clock_skew_ms,
        draining: r
            .draining_since
            .map(|since| (since, r.draining_by.unwrap_or_default())),
        running: r.running,
    })
}

/// Replica heartbeat: insert or refresh this replica's row.
/// `$8` is the run storage this build keeps
/// (`engine::queue_repair::RUN_STORAGE`).
pub const REPLICA_UPSERT: &str = "INSERT INTO replica
        (replica_id, hostname, labels, version, started_at, last_heartbeat, clock_skew_ms,
            run_storage)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
    ON CONFLICT (replica_id) DO UPDATE SET hostname = excluded.hostname,
        labels = excluded.labels, version = excluded.version,
        last_heartbeat = excluded.last_heartbeat, clock_skew_ms = excluded.clock_skew_ms,
        run_storage = excluded.run_storage
    RETURNING draining_since";

/// An operator's drain: kept from its first asking.
pub const REPLICA_DRAIN: &str = "UPDATE replica SET draining_since = $2, draining_by = $3
    WHERE replica_id = $1";

/// Whether a worker is draining, and since when by whom.
pub const REPLICA_DRAINING: &str =
    "SELECT draining_since, draining_by FROM replica WHERE replica_id = $1";

/// Graceful shutdown: a replica removes its own row.
pub const REPLICA_DELETE: &str = "DELETE FROM replica WHERE replica_id = $1";

/// Skip: a task with no live run becomes SKIPPED (caller checked status).
pub const TASK_SKIP: &str = "UPDATE task SET skipped_at = $2, skipped_by = $3 WHERE id = $1";

pub fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A claimed run as the claim query returns it.
#[derive(sqlx::FromRow)]
pub struct ClaimRow {
    pub id: i64,
    pub task_id: i64,
    pub plan_id: i64,
    pub attempt: i64,
    pub started_at: Ts,
    pub deadline: Ts,
    /// Some task waits for this run's task (its causes name this run's
    /// status).
    pub dependents: bool,
    pub executor: String,
    pub heartbeat_interval_ms: Option<i64>,
    pub heartbeat_timeout_ms: i64,
}

impl ClaimRow {
    pub fn into_claimed(self) -> Result<crate::store::ClaimedRun> {
        let executor = serde_json::from_str(&self.executor)
            .map_err(|e| StoreError::Corrupt(format!("executor of task {}: {e}", self.task_id)))?;
        Ok(crate::store::ClaimedRun {
            id: self.id,
            task_id: self.task_id,
            plan_id: self.plan_id,
            attempt: self.attempt,
            executor,
            started_at: self.started_at,
            deadline: self.deadline,
            heartbeat_interval: self.heartbeat_interval_ms.map(duration_ms),
            heartbeat_timeout: duration_ms(self.heartbeat_timeout_ms),
        })
    }
}

/// A run a finish batch moved out of RUNNING.
#[derive(sqlx::FromRow)]
pub struct FinishedRow {
    pub id: i64,
    pub plan_id: i64,
    pub status: String,
    pub task_id: i64,
    pub attempt: i64,
    pub max_attempts: i64,
    /// Some task waits for this run's task.
    pub dependents: bool,
}

/// A stored millisecond count as a duration (negative reads as zero).
fn duration_ms(ms: i64) -> std::time::Duration {
    std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// Each task's executor as the JSON text the `task` row stores.
pub fn executors_json(plan: &crate::plan::NewPlan) -> Result<Vec<String>> {
    plan.tasks
        .iter()
        .map(|t| serde_json::to_string(&t.executor))
        .collect::<Result<_, _>>()
        .map_err(|e| StoreError::Corrupt(format!("an executor does not serialise: {e}")))
}

/// The plan's own webhooks as stored in `plan.webhooks`.
pub fn webhooks_json(plan: &crate::plan::NewPlan) -> Result<String> {
    serde_json::to_string(&plan.webhooks).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// The status of a task as SQL, for actions that check it first.
pub const TASK_STATE: &str = concat!(
    "SELECT t.plan_id, ",
    task_status_sql!(),
    " AS status, r.id AS run_id FROM task t LEFT JOIN task_run r ON r.id = t.latest_run_id WHERE t.id = $1"
);

/// The tasks a plan-wide action gives a new attempt: `run` starts the
/// NOT_STARTED ones, `retry` the FAILED or CANCELED ones.
#[derive(Debug, Clone, Copy)]
pub enum PlanTasks {
    NotStarted,
    FailedOrCanceled,
}

impl PlanTasks {
    /// Selects the ids of those tasks of plan `$1`, oldest first.
    pub fn select_sql(self) -> String {
        let condition = match self {
            PlanTasks::NotStarted => "r.id IS NULL",
            PlanTasks::FailedOrCanceled => "r.status IN ('FAILED', 'CANCELED')",
        };
        format!(
            "SELECT t.id FROM task t LEFT JOIN task_run r ON r.id = t.latest_run_id
             WHERE t.plan_id = $1 AND t.skipped_at IS NULL AND {condition} ORDER BY t.id"
        )
    }

    /// The answer when the plan has no such task.
    pub fn none_left(self, plan_id: i64) -> StoreError {
        StoreError::Conflict(match self {
            PlanTasks::NotStarted => {
                format!("plan {plan_id} has no NOT_STARTED task to run; it has already started")
            }
            PlanTasks::FailedOrCanceled => {
                format!("plan {plan_id} has no FAILED or CANCELED task to retry")
            }
        })
    }

    /// The detail on each new run's creation event.
    pub fn detail(self, actor: &str) -> String {
        match self {
            PlanTasks::NotStarted => format!("started by {actor}"),
            PlanTasks::FailedOrCanceled => format!("retried by {actor}"),
        }
    }
}
