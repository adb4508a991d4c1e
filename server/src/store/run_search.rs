//! The runs search's SQL, newest first and paged by run id, fast with a
//! million runs stored and no index added to the hot path's live rows.
//!
//! A search reads in two steps. The *probe* walks the newest
//! [`PROBE_IDS`] run ids below the cursor through the primary key, every
//! filter tested on each row: a filter that matches often (a busy target,
//! DONE, the replica that ran most of the history) fills the page there.
//! Only when the probe leaves the page short does the *rest* go through
//! the filters' indexes, sorted by id (`ORDER BY r.id + 0` so that no
//! planner walks the primary key instead and reads the whole table for
//! a handful of old matches):
//!
//! | filter | index |
//! |---|---|
//! | status PENDING, AVAILABLE, RUNNING | the live-status partial indexes |
//! | status FAILED, CANCELED; error text | `task_run_ended_badly` |
//! | target prefix | `task_target` on the task, then `(task_id, attempt)` |
//! | plan name | a scan of `plan`, then `task (plan_id, name)`, then `(task_id, attempt)` |
//! | replica | `task_run_replica` (finished runs), `task_run_running` |
//! | actor | `run_event_actor` |
//! | since, until | `task_run_finished` |
//!
//! DONE alone has no index: the rest then walks on through the primary
//! key, which finds DONE runs at once wherever they are common.
//!
//! `until` also moves where the probe starts: run ids rise with creation
//! time, and a run that finished before `until` was created before it,
//! so the search bisects the ids for the first run created after `until`
//! (plus [`CLOCK_MARGIN`]) and starts there. A window of last night is
//! then read where it lies, not sorted out of the whole history.
//!
//! Each filter is written twice, as a test of one row (probe) and as a
//! condition an index can drive (rest); the two select the same runs, and
//! the conformance suite holds them to it.

use app::model::RunStatus;
use app::search::{RunList, RunSummary};

use super::engine::Arg;
use super::plan_list::name_pattern;
use super::rows::run_status;
use super::{Backend, Result, Ts};
use crate::run_filter::RunFilter;

/// Run ids the probe reads before the search turns to the indexes.
pub const PROBE_IDS: i64 = 4096;

/// How far the replicas' clocks may disagree for an `until` search to
/// start below the runs created after `until` (`reads::run_search`): a
/// run is taken to be created no earlier than this before a run with a
/// smaller id.
pub const CLOCK_MARGIN: std::time::Duration = std::time::Duration::from_secs(300);

/// Longest error text a result carries.
pub const ERROR_CHARS: i64 = 300;

/// The highest character, appended to a prefix to bound its range.
const LAST_CHAR: char = '\u{10FFFF}';

/// One filter as SQL: the row test, and the indexable form when it has one.
struct Condition {
    probe: String,
    indexed: Option<String>,
}

/// A search's two statements and their arguments. Arguments `$1`..`$3`
/// are the id range (`$2 <= id < $1`) and the row limit; the filters' own
/// start at `$4`.
pub struct Search {
    conditions: Vec<Condition>,
    values: Vec<Value>,
}

/// A filter argument, owned so that patterns built here outlive the call.
enum Value {
    Text(String),
    Time(Ts),
}

impl Search {
    pub fn new(backend: Backend, filter: &RunFilter) -> Search {
        let mut search = Search {
            conditions: Vec::new(),
            values: Vec::new(),
        };
        if let Some(status) = filter.status {
            search.status(status);
        }
        if let Some(prefix) = &filter.target {
            search.target(backend, prefix);
        }
        if let Some(name) = &filter.plan {
            let n = search.arg(Value::Text(name_pattern(name)));
            let plans =
                format!("SELECT pp.id FROM plan pp WHERE LOWER(pp.name) LIKE {n} ESCAPE '\\'");
            search.add(
                format!("LOWER(p.name) LIKE {n} ESCAPE '\\'"),
                Some(format!(
                    "r.task_id IN (SELECT tp.id FROM task tp WHERE tp.plan_id IN ({plans}))"
                )),
            );
        }
        if let Some(replica) = &filter.replica {
            let n = search.arg(Value::Text(replica.clone()));
            search.add(
                format!(
                    "r.replica_id = {n} AND (r.finished_at IS NOT NULL OR r.status = 'RUNNING')"
                ),
                Some(format!(
                    "((r.finished_at IS NOT NULL AND r.replica_id = {n})
                        OR (r.status = 'RUNNING' AND r.replica_id = {n}))"
                )),
            );
        }
        if let Some(actor) = &filter.actor {
            let n = search.arg(Value::Text(actor.clone()));
            // The predicate of the partial index `run_event_actor`, spelled
            // out so that both planners see the index applies.
            let acted =
                format!("e.actor = {n} AND e.replica_id IS NULL AND e.actor <> 'scheduler'");
            search.add(
                format!("EXISTS (SELECT 1 FROM run_event e WHERE e.run_id = r.id AND {acted})"),
                Some(format!(
                    "r.id IN (SELECT e.run_id FROM run_event e WHERE {acted})"
                )),
            );
        }
        if let Some(text) = &filter.error {
            let n = search.arg(Value::Text(name_pattern(text)));
            let test = format!(
                "r.status IN ('FAILED', 'CANCELED') AND LOWER(r.error) LIKE {n} ESCAPE '\\'"
            );
            search.add(test.clone(), Some(test));
        }
        if let Some(since) = filter.since {
            let n = search.arg(Value::Time(since));
            let test = format!("r.finished_at >= {n}");
            search.add(test.clone(), Some(test));
        }
        if let Some(until) = filter.until {
            let n = search.arg(Value::Time(until));
            let test = format!("r.finished_at < {n}");
            search.add(test.clone(), Some(test));
        }
        search
    }

    fn status(&mut self, status: RunStatus) {
        let test = format!("r.status = '{}'", status.as_str());
        let indexed = match status {
            RunStatus::Done => None,
            // SQLite uses a partial index only when the query repeats its
            // WHERE clause; PostgreSQL proves it either way.
            RunStatus::Failed | RunStatus::Canceled => {
                Some(format!("{test} AND r.status IN ('FAILED', 'CANCELED')"))
            }
            _ => Some(test.clone()),
        };
        self.add(test, indexed);
    }

    fn target(&mut self, backend: Backend, prefix: &str) {
        let collate = match backend {
            Backend::Postgres => " COLLATE \"C\"",
            Backend::Sqlite => "",
        };
        let n = self.arg(Value::Text(prefix.to_owned()));
        let hi = self.arg(Value::Text(format!("{prefix}{LAST_CHAR}")));
        let test = format!("SUBSTR(r.target, 1, LENGTH({n})) = {n}");
        let tasks = format!(
            "SELECT tt.id FROM task tt WHERE tt.target{collate} >= {n} AND tt.target{collate} < {hi}"
        );
        self.add(
            test.clone(),
            Some(format!("r.task_id IN ({tasks}) AND {test}")),
        );
    }

    fn add(&mut self, probe: String, indexed: Option<String>) {
        self.conditions.push(Condition { probe, indexed });
    }

    /// Adds a filter argument; its placeholder.
    fn arg(&mut self, value: Value) -> String {
        self.values.push(value);
        format!("${}", self.values.len() + 3)
    }

    /// The probe: every filter tested on each run of the id range, newest
    /// first through the primary key.
    pub fn probe_sql(&self) -> String {
        let tests: Vec<&str> = self.conditions.iter().map(|c| c.probe.as_str()).collect();
        select(&tests, "r.id")
    }

    /// The rest: through the filters' indexes when one has an index, else
    /// on down the primary key.
    pub fn rest_sql(&self) -> String {
        if self.conditions.iter().all(|c| c.indexed.is_none()) {
            return self.probe_sql();
        }
        let tests: Vec<&str> = self
            .conditions
            .iter()
            .map(|c| c.indexed.as_deref().unwrap_or(&c.probe))
            .collect();
        select(&tests, "r.id + 0")
    }

    /// The runs every filter matches and `applies` (a condition on `r`
    /// and its task `t`) holds for, with their tasks and plans, at most
    /// `$3`, in task order (the order their rows are locked in by `lock`).
    /// Bound with [`Search::args`]`(i64::MAX, 0, n)`.
    pub fn matching_sql(&self, applies: &str, lock: &str) -> String {
        let mut wheres = vec!["r.id < $1 AND r.id >= $2", applies];
        wheres.extend(self.conditions.iter().map(|c| c.probe.as_str()));
        format!(
            "SELECT r.id, r.task_id, r.plan_id
            FROM task_run r JOIN task t ON t.id = r.task_id JOIN plan p ON p.id = r.plan_id
            WHERE {}
            ORDER BY t.id LIMIT $3 {lock}",
            wheres.join("\n AND ")
        )
    }

    /// The arguments for runs `lower <= id < upper`, at most `limit`.
    pub fn args(&self, upper: i64, lower: i64, limit: i64) -> Vec<Arg<'_>> {
        let mut args = vec![Arg::from(upper), Arg::from(lower), Arg::from(limit)];
        args.extend(self.values.iter().map(|v| match v {
            Value::Text(text) => Arg::from(text.as_str()),
            Value::Time(at) => Arg::from(*at),
        }));
        args
    }
}

/// The statement for `tests`, ordered by `order` (the id, or an
/// expression of it that no index provides).
fn select(tests: &[&str], order: &str) -> String {
    // With an expression order the id range must not drive the plan either.
    let range = if order == "r.id" {
        "r.id < $1 AND r.id >= $2"
    } else {
        "r.id + 0 < $1 AND r.id + 0 >= $2"
    };
    let mut wheres = vec![range];
    wheres.extend_from_slice(tests);
    format!(
        "SELECT r.id, r.plan_id, p.name AS plan_name, r.task_id, t.name AS task_name, r.target,
            r.attempt, r.status, r.replica_id, r.created_at, r.finished_at,
            SUBSTR(r.error, 1, {ERROR_CHARS}) AS error
        FROM task_run r JOIN task t ON t.id = r.task_id JOIN plan p ON p.id = r.plan_id
        WHERE {}
        ORDER BY {order} DESC LIMIT $3",
        wheres.join("\n AND ")
    )
}

/// One run as the search reads it.
#[derive(sqlx::FromRow)]
pub struct RunSummaryRow {
    pub id: i64,
    pub plan_id: i64,
    pub plan_name: String,
    pub task_id: i64,
    pub task_name: String,
    pub target: String,
    pub attempt: i64,
    pub status: String,
    pub replica_id: Option<String>,
    pub created_at: Ts,
    pub finished_at: Option<Ts>,
    pub error: Option<String>,
}

/// The page: the first `limit` rows, and the cursor past them when more
/// were read.
pub fn page(rows: Vec<RunSummaryRow>, limit: usize) -> Result<RunList> {
    let more = rows.len() > limit;
    let runs = rows
        .into_iter()
        .take(limit)
        .map(|r| {
            Ok(RunSummary {
                id: r.id,
                plan_id: r.plan_id,
                plan_name: r.plan_name,
                task_id: r.task_id,
                task_name: r.task_name,
                target: r.target,
                attempt: r.attempt,
                status: run_status(&r.status)?,
                replica_id: r.replica_id,
                created_at: r.created_at.0,
                finished_at: r.finished_at.map(|t| t.0),
                error: r.error,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let next_before = more.then(|| runs.last().map(|r| r.id)).flatten();
    Ok(RunList { runs, next_before })
}
