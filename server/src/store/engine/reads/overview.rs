//! The reads behind the dashboard's overview and run pages, written to
//! stay fast with millions of runs: every query is answered from a small
//! index (the live-status partial indexes, the finish log or `task_run_finished`,
//! `task_run_failed`, `run_log_run`) instead of a scan of `task_run`.

use std::collections::BTreeMap;

use chrono::{DurationRound, TimeDelta};
use domain::model::RunStatus;
use domain::views::{FailureView, LogLineView, LogTail, MinuteCount};

use crate::store::{Result, StoreError};
use domain::time::Ts;

/// How many recent failures the overview lists.
pub const RECENT_FAILURES: i64 = 8;

/// Minutes the throughput chart covers (the current one included).
pub const CHART_MINUTES: i64 = 60;

/// What the overview shows about runs.
#[derive(Debug, Clone, PartialEq)]
pub struct OverviewStats {
    /// PENDING, AVAILABLE and RUNNING runs now.
    pub live: BTreeMap<RunStatus, i64>,
    /// Runs finished in the chart's window, by final status.
    pub last_hour: BTreeMap<RunStatus, i64>,
    pub per_minute: Vec<MinuteCount>,
    pub failures: Vec<FailureView>,
}

/// Each live status counted from its own partial index, or the queue of
/// AVAILABLE runs (an `IN` list would not match the indexes' predicates
/// and scan the table instead).
pub const LIVE_COUNTS: &str = "SELECT
    (SELECT COUNT(*) FROM task_run WHERE pending_held IS NOT NULL) AS pending,
    (SELECT COUNT(*) FROM available_run) AS available,
    (SELECT COUNT(*) FROM running_run) AS running";

/// Runs finished since `$1`, counted per minute and final status: from
/// `$from`, rows with `finished_at` and `status` that `$n` counts the runs
/// of (the finish log on PostgreSQL, a row per statement; `task_run`
/// through `task_run_finished` on SQLite). `$minute` is the backend's SQL
/// for a row's minute since the epoch.
macro_rules! finished_per_minute_sql {
    ($minute:literal, $n:literal, $from:literal) => {
        concat!(
            "SELECT ",
            $minute,
            " AS minute, status, ",
            $n,
            " AS n FROM ",
            $from,
            " WHERE finished_at >= $1 GROUP BY 1, 2"
        )
    };
}
pub(crate) use finished_per_minute_sql;

/// The latest FAILED runs, newest first, walking `task_run_failed` (on
/// `failed_at`, a FAILED run's `finished_at` as the database derives it).
pub const RECENT_FAILED: &str =
    "SELECT r.id, r.plan_id, p.name AS plan_name, t.name AS task_name, r.target, r.attempt,
        r.replica_id, r.finished_at, r.error
    FROM task_run r JOIN task t ON t.id = r.task_id JOIN plan p ON p.id = r.plan_id
    WHERE r.failed_at IS NOT NULL ORDER BY r.failed_at DESC LIMIT $1";

/// The end of a run's log, newest first (reversed before showing).
pub const LOG_TAIL: &str =
    "SELECT at, stream, line FROM run_log WHERE run_id = $1 ORDER BY id DESC LIMIT $2";

pub const LOG_COUNT: &str = "SELECT COUNT(*) FROM run_log WHERE run_id = $1";

#[derive(sqlx::FromRow)]
pub struct LiveRow {
    pub pending: i64,
    pub available: i64,
    pub running: i64,
}

#[derive(sqlx::FromRow)]
pub struct MinuteRow {
    pub minute: i64,
    pub status: String,
    pub n: i64,
}

#[derive(sqlx::FromRow)]
pub struct FailedRow {
    pub id: i64,
    pub plan_id: i64,
    pub plan_name: String,
    pub task_name: String,
    pub target: String,
    pub attempt: i64,
    pub replica_id: Option<String>,
    pub finished_at: Ts,
    pub error: Option<String>,
}

#[derive(sqlx::FromRow)]
pub struct LogTailRow {
    pub at: Ts,
    pub stream: String,
    pub line: String,
}

/// The first minute the chart shows: 59 whole minutes before the current.
pub fn window_start(now: Ts) -> Ts {
    let minute = now.0.duration_trunc(TimeDelta::minutes(1)).unwrap_or(now.0);
    Ts(minute - TimeDelta::minutes(CHART_MINUTES - 1))
}

pub fn overview_stats(
    now: Ts,
    live: LiveRow,
    minutes: Vec<MinuteRow>,
    failed: Vec<FailedRow>,
) -> Result<OverviewStats> {
    let start = window_start(now).0;
    let first = start.timestamp() / 60;
    let mut per_minute: Vec<MinuteCount> = (0..CHART_MINUTES)
        .map(|i| MinuteCount {
            minute: start + TimeDelta::minutes(i),
            ..MinuteCount::default()
        })
        .collect();
    let mut last_hour = BTreeMap::from([
        (RunStatus::Done, 0),
        (RunStatus::Failed, 0),
        (RunStatus::Canceled, 0),
    ]);
    for row in minutes {
        let status = RunStatus::parse(&row.status)
            .ok_or_else(|| StoreError::Corrupt(format!("run status {:?}", row.status)))?;
        // A clock step back could file a run under a minute after `now`.
        let Some(bucket) = usize::try_from(row.minute - first)
            .ok()
            .and_then(|i| per_minute.get_mut(i))
        else {
            continue;
        };
        match status {
            RunStatus::Done => bucket.done += row.n,
            RunStatus::Failed => bucket.failed += row.n,
            RunStatus::Canceled => bucket.canceled += row.n,
            _ => continue,
        }
        *last_hour.entry(status).or_insert(0) += row.n;
    }
    Ok(OverviewStats {
        live: BTreeMap::from([
            (RunStatus::Pending, live.pending),
            (RunStatus::Available, live.available),
            (RunStatus::Running, live.running),
        ]),
        last_hour,
        per_minute,
        failures: failed.into_iter().map(failure_view).collect(),
    })
}

fn failure_view(r: FailedRow) -> FailureView {
    FailureView {
        run_id: r.id,
        plan_id: r.plan_id,
        plan_name: r.plan_name,
        task_name: r.task_name,
        target: r.target,
        attempt: r.attempt,
        replica_id: r.replica_id,
        finished_at: r.finished_at.0,
        error: r.error,
    }
}

pub fn log_tail(mut newest_first: Vec<LogTailRow>, total: i64) -> LogTail {
    newest_first.reverse();
    LogTail {
        lines: newest_first
            .into_iter()
            .map(|l| LogLineView {
                at: l.at.0,
                stream: l.stream,
                line: l.line,
            })
            .collect(),
        total,
    }
}
