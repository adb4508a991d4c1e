//! The runs search's SQL, newest first and paged by run id, fast with a
//! million runs stored and no index added to the hot path's live rows.
//!
//! A search reads in two steps. The *probe* walks the newest
//! [`PROBE_IDS`] run ids below the cursor through the primary key, every
//! filter tested on each row: a filter that matches often (a busy target,
//! DONE, the replica that ran most of the history) fills the page there.
//! Only when the probe leaves the page short does the *rest* read on, in
//! two parts merged by id: the live runs (PENDING, AVAILABLE, RUNNING:
//! few, through their status indexes and logs), and the finished runs through the
//! filters' indexes, none of which gets an entry per run:
//!
//! | filter | finished runs through |
//! |---|---|
//! | actor | `plan_created_by` (who submitted the plan: one entry per plan), then as for a plan name; `run_event_actor` (later actions on runs) |
//! | plan name | a scan of `plan`; each task's latest run (`task.latest_run_id`) and the earlier attempts, which are all FAILED or CANCELED (`task_run_ended_badly`) |
//! | target, replica, status, error, since, until | the primary key, newest first (or `task_run_ended_badly`, and on SQLite `task_run_finished`, as the planner judges) |
//!
//! The target and replica filters have no index: each one tried cost the
//! hot path 13-16 % of throughput (the migration says more). A target or
//! replica used lately fills the page in the probe; one absent from recent
//! history is found by reading back through the primary key, the slow
//! searches (docs/benchmarks.md#runs-search).
//!
//! PostgreSQL keeps no index on a run's task (dropped from the hot path in
//! migration 0005), which is why the plan search goes by the task's
//! latest run rather than by task id.
//!
//! `until` also moves where the probe starts: run ids rise with creation
//! time, and a run that finished before `until` was created before it,
//! so the search bisects the ids for the first run created after `until`
//! (plus [`CLOCK_MARGIN`]) and starts there. A window of last night is
//! then read where it lies, not sorted out of the whole history.
//!
//! Each filter is written as a test of one row, and where it has an index
//! as a condition that index can drive; the two select the same runs, and
//! the conformance suite holds them to it.

use domain::search::{RunList, RunSummary};

use crate::store::engine::Arg;
use crate::store::engine::reads::plan_list_sql::{folded, name_pattern};
use crate::store::engine::reads::rows::run_status;
use crate::store::{Backend, Result};
use domain::filter::run::RunFilter;
use domain::model::RunStatus;
use domain::time::Ts;

/// Run ids the probe reads before the search turns to the indexes.
pub const PROBE_IDS: i64 = 4096;

/// How far the replicas' clocks may disagree for an `until` search to
/// start below the runs created after `until` (`reads::run_search_sql`): a
/// run is taken to be created no earlier than this before a run with a
/// smaller id.
pub const CLOCK_MARGIN: std::time::Duration = std::time::Duration::from_secs(300);

/// Longest error text a result carries.
pub const ERROR_CHARS: i64 = 300;

/// One filter as SQL: the row test, and the form an index of finished
/// runs can drive, when it has one.
struct Condition {
    probe: String,
    finished: Option<String>,
}

/// A search's two statements and their arguments. Arguments `$1`..`$3`
/// are the id range (`$2 <= id < $1`) and the row limit; the filters' own
/// start at `$4`.
pub struct Search {
    backend: Backend,
    conditions: Vec<Condition>,
    values: Vec<Value>,
    /// False when a filter matches finished runs only (a final status,
    /// error text, a finish time): the rest then skips the live runs.
    live: bool,
    /// False when a filter matches live runs only (a live status): the
    /// rest then skips the finished runs.
    finished: bool,
}

/// A filter argument, owned so that patterns built here outlive the call.
enum Value {
    Text(String),
    Time(Ts),
}

impl Search {
    pub fn new(backend: Backend, filter: &RunFilter) -> Search {
        let mut search = Search {
            backend,
            conditions: Vec::new(),
            values: Vec::new(),
            live: true,
            finished: true,
        };
        if let Some(status) = filter.status {
            // The statuses with an index of their own are tested through
            // its column (docs/design.md, "Run storage"), so that the
            // planner may walk it.
            let test = match status {
                RunStatus::Pending => "r.pending_held IS NOT NULL".to_owned(),
                RunStatus::Failed => "r.failed_at IS NOT NULL".to_owned(),
                RunStatus::Canceled => {
                    "r.ended_badly_plan IS NOT NULL AND r.status = 'CANCELED'".to_owned()
                }
                _ => format!("r.status = '{}'", status.as_str()),
            };
            search.live &= !status.is_terminal();
            search.finished &= status.is_terminal();
            search.add(test, None);
        }
        if let Some(prefix) = &filter.target {
            // No index: see migrations/*/…_run_search.sql. The rest reads
            // back through the primary key.
            let n = search.arg(Value::Text(prefix.clone()));
            search.add(format!("SUBSTR(r.target, 1, LENGTH({n})) = {n}"), None);
        }
        if let Some(name) = &filter.plan {
            let n = search.arg(Value::Text(name_pattern(name)));
            let named = format!("{} LIKE {n} ESCAPE '\\'", folded("pp.name", backend));
            // Every attempt but a task's latest FAILED or was CANCELED: a
            // new attempt is made for no other. The plans are found once.
            let runs = format!(
                "WITH named AS (SELECT pp.id FROM plan pp WHERE {named})
                 SELECT tp.latest_run_id FROM task tp JOIN named ON tp.plan_id = named.id
                    WHERE tp.latest_run_id IS NOT NULL
                 UNION ALL SELECT rb.id FROM task_run rb JOIN named ON rb.ended_badly_plan = named.id"
            );
            let finished = search.ids_in(&runs);
            search.add(
                format!("EXISTS (SELECT 1 FROM plan pp WHERE pp.id = r.plan_id AND {named})"),
                Some(finished),
            );
        }
        if let Some(replica) = &filter.replica {
            // No index, as for the target.
            let n = search.arg(Value::Text(replica.clone()));
            search.add(
                format!(
                    "r.replica_id = {n} AND (r.finished_at IS NOT NULL OR r.status = 'RUNNING')"
                ),
                None,
            );
        }
        if let Some(actor) = &filter.actor {
            let n = search.arg(Value::Text(actor.clone()));
            // The predicate of the partial index `run_event_actor`, spelled
            // as the migration of each backend does, so that both planners
            // see the index applies.
            let acted = match backend {
                Backend::Postgres => format!(
                    "e.actor = {n} AND e.actor <> 'scheduler' AND e.actor IS DISTINCT FROM e.replica_id
                        AND e.detail IS DISTINCT FROM 'submitted'"
                ),
                Backend::Sqlite => format!(
                    "e.actor = {n} AND e.actor <> 'scheduler' AND e.actor IS NOT e.replica_id
                        AND e.detail IS NOT 'submitted'"
                ),
            };
            // The same event when it is a stamp (`history_sql`): a run
            // ended CANCELED in the name of who asked, found through
            // `task_run_cancel_asked`.
            let distinct = match backend {
                Backend::Postgres => "IS DISTINCT FROM",
                Backend::Sqlite => "IS NOT",
            };
            let canceled = |run: &str| {
                format!(
                    "{run}.cancel_requested_by = {n} AND {run}.ended_seq IS NOT NULL
                        AND {run}.status = 'CANCELED' AND {run}.cancel_requested_by <> 'scheduler'
                        AND {run}.replica_id {distinct} {n}
                        AND {run}.error {distinct} 'submitted'"
                )
            };
            // A plan's runs were submitted by who submitted the plan; the
            // plan's runs are found as for the plan search.
            let runs = format!(
                "WITH mine AS (SELECT pa.id FROM plan pa WHERE pa.created_by = {n})
                 SELECT tp.latest_run_id FROM task tp JOIN mine ON tp.plan_id = mine.id
                    WHERE tp.latest_run_id IS NOT NULL
                 UNION ALL SELECT rb.id FROM task_run rb JOIN mine ON rb.ended_badly_plan = mine.id
                 UNION ALL SELECT e.run_id FROM run_event e WHERE {acted}
                 UNION ALL SELECT rc.id FROM task_run rc WHERE {}",
                canceled("rc")
            );
            let finished = search.ids_in(&runs);
            search.add(
                format!(
                    "(EXISTS (SELECT 1 FROM plan pa WHERE pa.id = r.plan_id AND pa.created_by = {n})
                      OR EXISTS (SELECT 1 FROM run_event e WHERE e.run_id = r.id AND {acted})
                      OR ({}))",
                    canceled("r")
                ),
                Some(finished),
            );
        }
        if let Some(text) = &filter.error {
            let n = search.arg(Value::Text(name_pattern(text)));
            search.live = false;
            search.add(
                format!(
                    "r.ended_badly_plan IS NOT NULL AND {} LIKE {n} ESCAPE '\\'",
                    folded("r.error", search.backend)
                ),
                None,
            );
        }
        if let Some(since) = filter.since {
            let n = search.arg(Value::Time(since.into()));
            search.live = false;
            search.add(format!("r.finished_at >= {n}"), None);
        }
        if let Some(until) = filter.until {
            let n = search.arg(Value::Time(until.into()));
            search.live = false;
            search.add(format!("r.finished_at < {n}"), None);
        }
        search
    }

    fn add(&mut self, probe: String, finished: Option<String>) {
        self.conditions.push(Condition { probe, finished });
    }

    /// Adds a filter argument; its placeholder.
    fn arg(&mut self, value: Value) -> String {
        self.values.push(value);
        format!("${}", self.values.len() + 3)
    }

    /// `r.id` is one of the ids `subquery` returns. On PostgreSQL the ids
    /// are gathered first (`ARRAY(…)`) and looked up by primary key; as a
    /// semi-join its planner would read all of `task_run` to hash them.
    fn ids_in(&self, subquery: &str) -> String {
        match self.backend {
            Backend::Postgres => format!("r.id = ANY(ARRAY({subquery}))"),
            Backend::Sqlite => format!("r.id IN ({subquery})"),
        }
    }

    /// The probe: every filter tested on each run of the id range, newest
    /// first through the primary key.
    pub fn probe_sql(&self) -> String {
        let tests: Vec<&str> = self.conditions.iter().map(|c| c.probe.as_str()).collect();
        select(&["r.id < $1 AND r.id >= $2"], &tests)
    }

    /// The rest's finished runs: through the filters' indexes of finished
    /// runs, or on down the primary key when none has one; `None` when the
    /// filter matches live runs only.
    pub fn rest_finished_sql(&self) -> Option<String> {
        if !self.finished {
            return None;
        }
        let tests: Vec<&str> = self
            .conditions
            .iter()
            .map(|c| c.finished.as_deref().unwrap_or(&c.probe))
            .collect();
        Some(select(
            &["r.id < $1 AND r.id >= $2", "r.finished_at IS NOT NULL"],
            &tests,
        ))
    }

    /// The rest's live runs, through their status indexes and the queue of
    /// AVAILABLE runs; `None` when the filter matches finished runs only.
    pub fn rest_live_sql(&self) -> Option<String> {
        if !self.live {
            return None;
        }
        let live = self.ids_in(
            "SELECT id FROM task_run WHERE pending_held IS NOT NULL
             UNION ALL SELECT run_id FROM available_run
             UNION ALL SELECT id FROM running_run",
        );
        let tests: Vec<&str> = self.conditions.iter().map(|c| c.probe.as_str()).collect();
        Some(select(&["r.id < $1 AND r.id >= $2", &live], &tests))
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

/// The statement: runs meeting `scope` and every filter's `tests`,
/// newest first, at most `$3`, with their task's and plan's names. The
/// page is chosen from `task_run` alone, and only its runs are joined:
/// joined first, every match was (a rare target's 5,000 runs, each with
/// its task and plan, to keep 50).
fn select(scope: &[&str], tests: &[&str]) -> String {
    let wheres: Vec<&str> = scope.iter().chain(tests).copied().collect();
    format!(
        "SELECT r.id, r.plan_id, p.name AS plan_name, r.task_id, t.name AS task_name, r.target,
            r.attempt, r.status, r.replica_id, r.created_at, r.finished_at,
            SUBSTR(r.error, 1, {ERROR_CHARS}) AS error, r.cancel_requested_by
        FROM (SELECT r.id FROM task_run r WHERE {}
            ORDER BY r.id DESC LIMIT $3) page
        JOIN task_run r ON r.id = page.id
        JOIN task t ON t.id = r.task_id JOIN plan p ON p.id = r.plan_id
        ORDER BY r.id DESC",
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
    pub cancel_requested_by: Option<String>,
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
                cancel_requested_by: r.cancel_requested_by,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let next_before = more.then(|| runs.last().map(|r| r.id)).flatten();
    Ok(RunList { runs, next_before })
}
