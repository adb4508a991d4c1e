//! The plan list's SQL (API and dashboard), built to stay fast with
//! hundreds of thousands of plans.
//!
//! A page is picked first, walking the plan primary key newest first, and
//! only its plans' tasks are counted. A status filter never derives the
//! status of every plan: each non-DONE status is a small set found through
//! a partial index (the live statuses, `task_run_failed`,
//! `task_run_ended_badly`) or a one-row probe per plan (never started), and
//! DONE is what is in none of them; HALTED is a plan with a run halted
//! behind a failed task and none that can move. The precedence is that of
//! `PlanStatus::from_counts`; the conformance suite checks they agree.
//!
//! Placeholders: `$1` a lower-case `LIKE` pattern for the name or NULL,
//! `$2` the limit, `$3` the offset. A bulk action on the list
//! ([`bulk_sql`]) selects its runs with the same filter.

use std::collections::BTreeMap;

use domain::model::{PlanList, PlanStatus, PlanSummary, TaskStatus};

use crate::store::engine::gates::latest_unskipped_sql;
use crate::store::engine::reads::rows::{blocked_like, stuck_columns_sql, task_status_sql};
use crate::store::{Backend, Result, StoreError};
use domain::time::Ts;

/// Plans with a PENDING, AVAILABLE or RUNNING run (a live run is always
/// its task's latest), one partial index or queue each.
const LIVE: &str = "SELECT plan_id FROM task_run WHERE pending_held IS NOT NULL
    UNION SELECT r.plan_id FROM available_run q JOIN task_run r ON r.id = q.run_id
    UNION SELECT plan_id FROM running_run";

/// Plans with a PENDING run halted behind a FAILED or CANCELED task.
const BLOCKED: &str = concat!(
    "SELECT plan_id FROM task_run WHERE pending_held IS NOT NULL AND waiting_cause LIKE ",
    blocked_like!()
);

/// Plans with a run that can move by itself: AVAILABLE, RUNNING, or
/// PENDING neither halted nor waiting for a dependency.
const MOVING: &str = concat!(
    "SELECT r.plan_id FROM available_run q JOIN task_run r ON r.id = q.run_id
    UNION SELECT plan_id FROM running_run
    UNION SELECT plan_id FROM task_run WHERE pending_held = 0
        AND COALESCE(waiting_cause, '') NOT LIKE ",
    blocked_like!()
);

/// Plans with a task whose latest run FAILED and that is not skipped:
/// each run in `task_run_failed` looked up in `task` by key
/// (`gates::latest_unskipped_sql`).
const FAILED: &str = concat!(
    "SELECT r.plan_id FROM task_run r WHERE r.failed_at IS NOT NULL AND ",
    latest_unskipped_sql!()
);

/// The same for CANCELED, through `task_run_ended_badly`.
const CANCELED: &str = concat!(
    "SELECT r.plan_id FROM task_run r
    WHERE r.ended_badly_plan IS NOT NULL AND r.status = 'CANCELED' AND ",
    latest_unskipped_sql!()
);

/// Plan `p` has a task that never ran and is not skipped. Only a plan
/// submitted with `start: false` and not started since has one (starting
/// creates a run for every such task), and then none of its tasks has a
/// run: so the probe stops at a started plan's first task.
const NEVER_STARTED: &str = "(NOT EXISTS (SELECT 1 FROM task t
        WHERE t.plan_id = p.id AND t.latest_run_id IS NOT NULL)
    AND EXISTS (SELECT 1 FROM task t WHERE t.plan_id = p.id AND t.skipped_at IS NULL))";

/// The condition on plan `p` for the list: its name and status.
fn filter(status: Option<PlanStatus>, backend: Backend) -> String {
    let halted = format!("(p.id IN ({BLOCKED}) AND p.id NOT IN ({MOVING}))");
    let status = match status {
        None => "TRUE".to_owned(),
        Some(PlanStatus::Running) => format!("p.id IN ({LIVE}) AND NOT {halted}"),
        Some(PlanStatus::Halted) => halted,
        Some(PlanStatus::NotStarted) => NEVER_STARTED.to_owned(),
        // A halted plan needs the same hands as a failed one.
        Some(PlanStatus::Failed) => {
            format!("(p.id IN ({FAILED}) AND p.id NOT IN ({LIVE}) OR {halted})")
        }
        Some(PlanStatus::Canceled) => {
            format!("p.id IN ({CANCELED}) AND p.id NOT IN ({LIVE}) AND p.id NOT IN ({FAILED})")
        }
        Some(PlanStatus::Done) => format!(
            "p.id NOT IN ({LIVE}) AND p.id NOT IN ({FAILED}) AND p.id NOT IN ({CANCELED})
             AND NOT {NEVER_STARTED}"
        ),
    };
    let name = folded("p.name", backend);
    format!("(CAST($1 AS TEXT) IS NULL OR {name} LIKE $1 ESCAPE '\\') AND {status}")
}

/// One page of plans with their task counts and derived status.
pub fn page_sql(status: Option<PlanStatus>, backend: Backend) -> String {
    format!(
        "WITH page AS (
            SELECT p.id, p.name, p.created_at FROM plan p WHERE {filter}
            ORDER BY p.id DESC LIMIT $2 OFFSET $3),
        -- `IN`, not a join with `page`: SQLite would otherwise scan every
        -- task and probe the page, instead of probing each plan's tasks.
        task_state AS (SELECT t.plan_id, {task_status} AS status, {stuck}
            FROM task t LEFT JOIN task_run r ON r.id = t.latest_run_id
            WHERE t.plan_id IN (SELECT id FROM page)),
        counted AS (
            SELECT plan_id,
                SUM(CASE WHEN status = 'NOT_STARTED' THEN 1 ELSE 0 END) AS not_started,
                SUM(CASE WHEN status = 'PENDING' THEN 1 ELSE 0 END) AS pending,
                SUM(CASE WHEN status = 'AVAILABLE' THEN 1 ELSE 0 END) AS available,
                SUM(CASE WHEN status = 'RUNNING' THEN 1 ELSE 0 END) AS running,
                SUM(CASE WHEN status = 'DONE' THEN 1 ELSE 0 END) AS done,
                SUM(CASE WHEN status = 'FAILED' THEN 1 ELSE 0 END) AS failed,
                SUM(CASE WHEN status = 'CANCELED' THEN 1 ELSE 0 END) AS canceled,
                SUM(CASE WHEN status = 'SKIPPED' THEN 1 ELSE 0 END) AS skipped,
                SUM(blocked) AS blocked, SUM(waiting) AS waiting
            FROM task_state GROUP BY plan_id)
        SELECT page.id, page.name, page.created_at, CASE
                WHEN c.pending - c.blocked - c.waiting + c.available + c.running > 0
                    OR (c.pending > 0 AND c.blocked = 0) THEN 'RUNNING'
                WHEN c.blocked > 0 THEN 'HALTED'
                WHEN c.not_started > 0 THEN 'NOT_STARTED'
                WHEN c.failed > 0 THEN 'FAILED'
                WHEN c.canceled > 0 THEN 'CANCELED'
                ELSE 'DONE' END AS status,
            c.not_started, c.pending, c.available, c.running, c.done, c.failed, c.canceled,
            c.skipped, c.blocked
        FROM page JOIN counted c ON c.plan_id = page.id
        ORDER BY page.id DESC",
        filter = filter(status, backend),
        task_status = task_status_sql!(),
        stuck = stuck_columns_sql!(),
    )
}

/// How many plans the filter matches in all (`$1` only).
pub fn count_sql(status: Option<PlanStatus>, backend: Backend) -> String {
    format!(
        "SELECT COUNT(*) FROM plan p WHERE {}",
        filter(status, backend)
    )
}

/// The runs of the plans the filter matches that `applies` (a condition
/// on run `r` and its task `t`) holds for, with their tasks and plans, at
/// most `$2`, in task order (the order `lock` locks their tasks in): what
/// a bulk action on the list changes. Driven by the runs `applies` picks
/// (each through a small partial index), each tested against its plan.
pub fn bulk_sql(status: Option<PlanStatus>, applies: &str, lock: &str, backend: Backend) -> String {
    format!(
        "SELECT r.id, r.task_id, r.plan_id
        FROM task_run r JOIN task t ON t.id = r.task_id JOIN plan p ON p.id = r.plan_id
        WHERE {applies}
         AND {filter}
        ORDER BY t.id LIMIT $2 {lock}",
        filter = filter(status, backend),
    )
}

/// `expr` in lower case for a search "in any case", ASCII letters only, on
/// both backends alike: SQLite's `LOWER` folds only ASCII, PostgreSQL's
/// every script, so `ÉTÉ` found `été` on one and not on the other (and
/// a bulk action on the same filter changed different plans). Under the
/// "C" collation PostgreSQL's `LOWER` folds only ASCII too.
pub fn folded(expr: &str, backend: Backend) -> String {
    match backend {
        Backend::Sqlite => format!("LOWER({expr})"),
        Backend::Postgres => format!("LOWER({expr} COLLATE \"C\")"),
    }
}

/// The `LIKE` pattern matching names that contain `text`, any case.
pub fn name_pattern(text: &str) -> String {
    let mut pattern = String::from("%");
    for c in text.to_ascii_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

/// One plan of a page, with its tasks counted by status.
#[derive(sqlx::FromRow)]
pub struct PlanListRow {
    pub id: i64,
    pub name: String,
    pub created_at: Ts,
    pub status: String,
    pub not_started: i64,
    pub pending: i64,
    pub available: i64,
    pub running: i64,
    pub done: i64,
    pub failed: i64,
    pub canceled: i64,
    pub skipped: i64,
    pub blocked: i64,
}

/// The page as the API and the dashboard show it.
pub fn page(rows: Vec<PlanListRow>, total: i64) -> Result<PlanList> {
    let plans = rows
        .into_iter()
        .map(|r| {
            let counts: BTreeMap<TaskStatus, i64> = [
                (TaskStatus::NotStarted, r.not_started),
                (TaskStatus::Pending, r.pending),
                (TaskStatus::Available, r.available),
                (TaskStatus::Running, r.running),
                (TaskStatus::Done, r.done),
                (TaskStatus::Failed, r.failed),
                (TaskStatus::Canceled, r.canceled),
                (TaskStatus::Skipped, r.skipped),
            ]
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect();
            let status = PlanStatus::parse(&r.status).ok_or_else(|| {
                StoreError::Corrupt(format!("unknown plan status {:?}", r.status))
            })?;
            Ok(PlanSummary {
                id: r.id,
                name: r.name,
                status,
                counts,
                blocked: r.blocked,
                created_at: r.created_at.0,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(PlanList { plans, total })
}
