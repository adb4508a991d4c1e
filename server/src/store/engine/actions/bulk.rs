//! Bulk actions: Retry, Cancel or Skip every run a runs search matches
//! that the action applies to, in one transaction, refused unless the
//! filter still matches as many runs as the operator was shown. The
//! plans list's bulk actions ([`crate::store::engine::actions::plan_bulk`]) select their runs
//! their own way and share the rest: [`apply`].
//!
//! The count is taken again inside the transaction, with the tasks' rows
//! locked (PostgreSQL; SQLite's writer lock serialises the whole
//! transaction): a run that failed, or was retried by someone else, since
//! the page was drawn changes the count, and nothing is done to runs the
//! operator never saw.

use std::collections::BTreeSet;

use domain::search::{BulkAction, BulkResult};

use crate::store::engine::actions::{cancel_runs, new_phase, retrying_deadlocks, run_count};
use crate::store::engine::audit::Asked;
use crate::store::engine::execution::outcomes;
use crate::store::engine::gates::dependencies;
use crate::store::engine::notifications::PlanOutcomes;
use crate::store::engine::plans::new_runs::create_runs;
use crate::store::engine::reads::run_search_sql::Search;
use crate::store::engine::{Arg, BATCH, Dialect, RowLock, Sql, placeholders, read_one};
use crate::store::signals::Signal;
use crate::store::{Actor, Result, StoreError};
use domain::filter::run::RunFilter;
use domain::time::Ts;

/// A filter as an audit entry names it: `runs status=FAILED target=db/`.
pub fn described(filter: &RunFilter) -> String {
    let mut parts = vec!["runs".to_owned()];
    let mut part = |name: &str, value: Option<String>| {
        if let Some(v) = value {
            parts.push(format!("{name}={v}"));
        }
    };
    part("status", filter.status.map(|s| s.as_str().to_owned()));
    part("target", filter.target.clone());
    part("plan", filter.plan.clone());
    part("replica", filter.replica.clone());
    part("actor", filter.actor.clone());
    part("error", filter.error.clone());
    part("since", filter.since.map(domain::time::rfc3339));
    part("until", filter.until.map(domain::time::rfc3339));
    parts.join(" ")
}

/// The list a bulk action was asked from.
#[derive(Clone, Copy)]
pub enum List {
    Runs,
    Plans,
}

/// The audit action of `action` asked from `list`: `runs.bulk_retry`.
pub fn verb(list: List, action: BulkAction) -> &'static str {
    match (list, action) {
        (List::Runs, BulkAction::Retry) => "runs.bulk_retry",
        (List::Runs, BulkAction::Cancel) => "runs.bulk_cancel",
        (List::Runs, BulkAction::Skip) => "runs.bulk_skip",
        (List::Plans, BulkAction::Retry) => "plans.bulk_retry",
        (List::Plans, BulkAction::Cancel) => "plans.bulk_cancel",
        (List::Plans, BulkAction::Skip) => "plans.bulk_skip",
    }
}

/// Most runs one bulk action changes: a filter that matches more is
/// refused, so that one click never rewrites a whole history.
pub const MAX_RUNS: i64 = 10_000;

/// The runs `action` applies to, as a condition on run `r` and task `t`.
/// Each is driven by a small partial index (`task_run_ended_badly`, the
/// live-status ones), so counting stays cheap with a million runs.
pub(super) fn applies(action: BulkAction) -> &'static str {
    match action {
        BulkAction::Retry | BulkAction::Skip => {
            "r.ended_badly_plan IS NOT NULL AND t.latest_run_id = r.id AND t.skipped_at IS NULL"
        }
        BulkAction::Cancel => {
            "(r.status = 'PENDING' OR r.status = 'AVAILABLE' OR r.status = 'RUNNING')"
        }
    }
}

/// How many runs `action` would change, counted up to [`MAX_RUNS`] + 1.
pub async fn bulk_count<D: Dialect>(d: &D, filter: &RunFilter, action: BulkAction) -> Result<i64> {
    let search = Search::new(D::BACKEND, filter);
    let sql = format!(
        "SELECT COUNT(*) FROM ({}) AS m",
        search.matching_sql(applies(action), "")
    );
    let args = search.args(i64::MAX, 0, MAX_RUNS + 1);
    let (n,): (i64,) = read_one(d, Sql::built(sql).unprepared(), &args).await?;
    Ok(n)
}

/// Applies `action` to the runs `filter` matches, if they are `expected`
/// in number.
pub async fn bulk_apply<D: Dialect>(
    d: &D,
    filter: &RunFilter,
    action: BulkAction,
    expected: i64,
    asked: &Asked<'_>,
    now: Ts,
) -> Result<BulkResult> {
    let search = Search::new(D::BACKEND, filter);
    let sql = search.matching_sql(applies(action), D::row_lock(RowLock::Tasks));
    let args = search.args(i64::MAX, 0, MAX_RUNS + 1);
    let matching = Sql::built(sql).unprepared();
    apply(d, matching, &args, action, expected, asked, now).await
}

/// The one apply path of every bulk action: in one transaction, reads the
/// runs `matching` selects (`(run, task, plan)`, at most [`MAX_RUNS`] + 1,
/// their tasks locked), refuses unless they are `expected` in number, and
/// applies `action` to them, each run's event naming who, with one audit
/// entry for the whole. Thousands of runs locked at once can deadlock
/// with a finish batch, as a plan-wide action can: the database breaks
/// it, and the whole transaction is tried again, the count with it.
pub(super) async fn apply<D: Dialect>(
    d: &D,
    matching: Sql,
    args: &[Arg<'_>],
    action: BulkAction,
    expected: i64,
    asked: &Asked<'_>,
    now: Ts,
) -> Result<BulkResult> {
    retrying_deadlocks::<D, _, _, _>(move || {
        apply_once(d, matching.clone(), args, action, expected, asked, now)
    })
    .await
}

/// One try of [`apply`].
async fn apply_once<D: Dialect>(
    d: &D,
    matching: Sql,
    args: &[Arg<'_>],
    action: BulkAction,
    expected: i64,
    asked: &Asked<'_>,
    now: Ts,
) -> Result<BulkResult> {
    let actor = asked.by.name;
    let mut tx = d.begin().await?;
    let matched: Vec<(i64, i64, i64)> = D::fetch_all(&mut tx, matching, args).await?;
    let n = matched.len() as i64;
    if n > MAX_RUNS {
        return Err(StoreError::Invalid(format!(
            "the filter matches more than {MAX_RUNS} runs to {}; narrow it",
            action.as_str()
        )));
    }
    if n != expected {
        return Err(StoreError::Conflict(format!(
            "the filter now matches {n} {} to {}, you saw {expected}; nothing was changed, look again",
            if n == 1 { "run" } else { "runs" },
            action.as_str()
        )));
    }
    if n == 0 {
        return Err(StoreError::Conflict(format!(
            "the filter matches no run to {}; nothing was changed",
            action.as_str()
        )));
    }
    let runs: Vec<i64> = matched.iter().map(|m| m.0).collect();
    let tasks: Vec<i64> = matched.iter().map(|m| m.1).collect();
    let plans: BTreeSet<i64> = matched.iter().map(|m| m.2).collect();
    let detail = format!(
        "{} by {actor} (bulk, {})",
        action.past(),
        run_count(n as u64)
    );
    let mut deliveries = false;
    match action {
        BulkAction::Retry => {
            create_runs::<D>(
                &mut tx,
                &tasks,
                &vec![None; tasks.len()],
                actor,
                &detail,
                now,
            )
            .await?;
            for plan in &plans {
                new_phase::<D>(&mut tx, *plan).await?;
            }
        }
        BulkAction::Cancel => {
            cancel_runs::<D>(&mut tx, &runs, actor, now).await?;
        }
        BulkAction::Skip => {
            skip_tasks::<D>(&mut tx, &tasks, &runs, actor, &detail, now).await?;
            // Skipped failures are decided: a new phase (see `task_skip`).
            for plan in &plans {
                new_phase::<D>(&mut tx, *plan).await?;
            }
            let progressed = PlanOutcomes {
                progressed: plans.into_iter().collect(),
                ..Default::default()
            };
            let targets = d.notify_targets();
            let notified = outcomes::notify_plans::<D>(&mut tx, &targets, progressed, now).await?;
            deliveries = outcomes::announce_deliveries::<D>(&mut tx, &notified).await?;
        }
    }
    asked.done::<D>(&mut tx, &run_count(n as u64), now).await?;
    D::commit(tx).await?;
    if action == BulkAction::Cancel {
        d.signals().raise(Signal::Canceled);
    }
    d.signals().raise(Signal::Changed);
    if deliveries {
        d.signals().raise(Signal::Deliveries);
    }
    Ok(BulkResult { action, changed: n })
}

/// Marks `tasks` skipped, records it on each one's latest run (`runs`),
/// and releases what waited for them.
async fn skip_tasks<D: Dialect>(
    tx: &mut D::Tx,
    tasks: &[i64],
    runs: &[i64],
    actor: Actor<'_>,
    detail: &str,
    now: Ts,
) -> Result<()> {
    for chunk in tasks.chunks(BATCH) {
        let sql = format!(
            "UPDATE task SET skipped_at = $1, skipped_by = $2 WHERE id IN ({})",
            placeholders(3, chunk.len())
        );
        let mut args = vec![now.into(), actor.into()];
        args.extend(crate::store::engine::id_args(chunk));
        D::execute(tx, Sql::built(sql), &args).await?;
    }
    for chunk in runs.chunks(BATCH) {
        let sql = format!(
            "INSERT INTO run_event (run_id, from_status, to_status, actor, at, detail)
             SELECT id, status, status, $1, $2, $3 FROM task_run WHERE id IN ({})",
            placeholders(4, chunk.len())
        );
        let mut args = vec![actor.into(), now.into(), detail.into()];
        args.extend(crate::store::engine::id_args(chunk));
        D::execute(tx, Sql::built(sql), &args).await?;
    }
    dependencies::completed::<D>(tx, tasks, now).await?;
    D::announce(tx, Signal::Changed).await?;
    Ok(())
}
