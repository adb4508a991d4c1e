//! Retention: deleting finished plans once nobody needs them, with
//! everything that belongs to them.
//!
//! A plan may go when every task is terminal (DONE, SKIPPED, FAILED or
//! CANCELED: nothing PENDING, AVAILABLE or RUNNING, nothing NOT_STARTED),
//! nothing of it changed since the cutoff (no run created or finished, no
//! skip, approval or pause), it waits in no schedule's queue and no
//! webhook delivery of it is still pending. Finding candidates is a read;
//! each deletion re-checks them with the plan's task rows locked, so an
//! operator's retry or skip that lands first keeps the plan, and one that
//! comes later finds it gone (404).
//!
//! One transaction deletes whole plans, never part of one: a plan is
//! either all there, with its history, or gone. A batch holds up to
//! [`BATCH_RUNS`] runs (one plan may exceed it alone); only rows of dead
//! plans are locked, so on PostgreSQL claims never wait on it, and on
//! SQLite each batch holds the single writer for a few milliseconds.

use super::{BATCH, Dialect, RowLock, Sql, id_args, placeholders};
use crate::store::engine::reads::history_sql;
use crate::store::submission::IDEMPOTENCY_WINDOW;
use crate::store::{Result, StoreError};
use domain::time::Ts;

/// About how many runs (with their events and logs) one deletion takes.
pub const BATCH_RUNS: i64 = 500;

/// Where a search for plans to prune goes on from: after this plan in
/// (created_at, id) order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneCursor {
    pub created_at: Ts,
    pub id: i64,
}

/// A plan that may be pruned, as a search found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prunable {
    pub plan_id: i64,
    /// Its tasks' latest runs: what a batch's size is counted in.
    pub runs: i64,
}

/// What one search found: the plans that may go, and where the next
/// search goes on (`None`: no older plan is left to look at).
#[derive(Debug, Clone, Default)]
pub struct PruneScan {
    pub prunable: Vec<Prunable>,
    pub next: Option<PruneCursor>,
}

/// What a deletion removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneReport {
    pub plans: u64,
    pub tasks: u64,
    pub runs: u64,
    pub events: u64,
    pub logs: u64,
    pub deliveries: u64,
}

impl PruneReport {
    pub fn add(&mut self, other: PruneReport) {
        self.plans += other.plans;
        self.tasks += other.tasks;
        self.runs += other.runs;
        self.events += other.events;
        self.logs += other.logs;
        self.deliveries += other.deliveries;
    }
}

/// What the plan row alone says: created before the cutoff `$1`, not
/// waiting in a schedule's queue, not paused since, no webhook delivery
/// still to send, and holding none of the highest plan, task and run ids.
///
/// SQLite gives a new row the highest id there is plus one (these tables
/// are not AUTOINCREMENT), so deleting the newest rows handed their ids
/// out again: a new run got the fencing token of a pruned one, which a
/// target that remembers the highest token it accepted would refuse, and
/// the audit log named two plans "plan 1". Keeping the few plans that hold
/// a highest id keeps every id growing, on both backends alike.
///
/// A plan that halts a version line is kept: a versioned task whose latest
/// run ended FAILED or CANCELED, that nobody skipped, holds every larger
/// version of its target until an operator retries or skips it (gate 2).
/// Pruned, the halt was gone and the next version ran unasked (hostile
/// trial). Read through `task_run_ended_badly (ended_badly_plan)`.
///
/// A plan submitted with an idempotency key is kept while the key stands
/// (created at or after `$keys`, [`IDEMPOTENCY_WINDOW`] ago): deleting the
/// plan deletes its key, and a client retrying within the window, as
/// promised it may, would have made a second plan and run it all again.
fn plan_may_go(keys: usize) -> String {
    format!(
        "created_at < $1 AND NOT queued AND (paused_at IS NULL OR paused_at < $1)
    AND NOT EXISTS (SELECT 1 FROM delivery d WHERE d.plan_id = plan.id AND d.state = 'PENDING')
    AND NOT EXISTS (SELECT 1 FROM plan_submission k
        WHERE k.plan_id = plan.id AND k.created_at >= ${keys})
    AND NOT EXISTS (SELECT 1 FROM task_run h JOIN task ht ON ht.id = h.task_id
        WHERE h.ended_badly_plan = plan.id
          AND h.version IS NOT NULL AND ht.latest_run_id = h.id AND ht.skipped_at IS NULL)
    AND plan.id <> COALESCE((SELECT MAX(p.id) FROM plan p), 0)
    AND plan.id <> COALESCE((SELECT t.plan_id FROM task t
        WHERE t.id = (SELECT MAX(tt.id) FROM task tt)), 0)
    AND plan.id <> COALESCE((SELECT r.plan_id FROM task_run r
        WHERE r.id = (SELECT MAX(rr.id) FROM task_run rr)), 0)"
    )
}

/// Since when an idempotency key still stands: on this replica's clock,
/// as keys are stamped by the one that took the submit.
fn keys_standing_since() -> Ts {
    Ts::now().minus(IDEMPOTENCY_WINDOW)
}

/// Old plans, oldest first, from the first (`$2` is the limit) or after a
/// cursor (`$2`, `$3`; `$4` the limit). Served by `plan_created
/// (created_at, id)`.
fn old_plans_sql(after_cursor: bool) -> Sql {
    let (after, limit, keys) = if after_cursor {
        (
            "AND (created_at > $2 OR (created_at = $2 AND id > $3))",
            "$4",
            5,
        )
    } else {
        ("", "$2", 3)
    };
    let may_go = plan_may_go(keys);
    Sql::built(format!(
        "SELECT id, created_at FROM plan WHERE {may_go} {after}
         ORDER BY created_at, id LIMIT {limit}"
    ))
}

/// Per plan of a list (`{ids}`, from `$2`): tasks still open, tasks
/// changed at or after the cutoff `$1`, and latest runs. A comparison
/// with NULL is NULL on both databases, so a missing run or skip counts
/// as no change.
const TASK_STATES: &str = "SELECT t.plan_id,
      SUM(CASE WHEN t.skipped_at IS NULL AND (r.id IS NULL
            OR r.status IN ('PENDING', 'AVAILABLE', 'RUNNING')) THEN 1 ELSE 0 END) AS open,
      SUM(CASE WHEN r.created_at >= $1 OR r.finished_at >= $1 OR t.skipped_at >= $1
            OR t.approved_at >= $1 THEN 1 ELSE 0 END) AS recent,
      COUNT(r.id) AS runs
    FROM task t LEFT JOIN task_run r ON r.id = t.latest_run_id
    WHERE t.plan_id IN ({ids}) GROUP BY t.plan_id";

/// Looks at up to `limit` plans created before `cutoff`, after `from`;
/// returns those that may be pruned now.
pub async fn plan_prune_scan<D: Dialect>(
    d: &D,
    cutoff: Ts,
    from: Option<PruneCursor>,
    limit: i64,
) -> Result<PruneScan> {
    let limit = limit.clamp(1, BATCH as i64);
    let (sql, args) = match from {
        None => (
            old_plans_sql(false),
            vec![cutoff.into(), limit.into(), keys_standing_since().into()],
        ),
        Some(c) => (
            old_plans_sql(true),
            vec![
                cutoff.into(),
                c.created_at.into(),
                c.id.into(),
                limit.into(),
                keys_standing_since().into(),
            ],
        ),
    };
    let old: Vec<(i64, Ts)> = d.read(sql, &args).await?;
    let next = (old.len() as i64 == limit).then(|| {
        let (id, created_at) = *old.last().expect("limit >= 1 rows");
        PruneCursor { created_at, id }
    });
    let ids: Vec<i64> = old.iter().map(|(id, _)| *id).collect();
    if ids.is_empty() {
        return Ok(PruneScan::default());
    }
    let states: Vec<(i64, i64, i64, i64)> = d
        .read(task_states_sql(ids.len()), &task_states_args(cutoff, &ids))
        .await?;
    let prunable = states
        .into_iter()
        .filter(|&(_, open, recent, _)| open == 0 && recent == 0)
        .map(|(plan_id, _, _, runs)| Prunable { plan_id, runs })
        .collect();
    Ok(PruneScan { prunable, next })
}

fn task_states_sql(n: usize) -> Sql {
    Sql::built(TASK_STATES.replace("{ids}", &placeholders(2, n)))
}

/// `ids` is never empty: both callers return before.
fn task_states_args(cutoff: Ts, ids: &[i64]) -> Vec<super::Arg<'static>> {
    let mut args = vec![cutoff.into()];
    args.extend(id_args(ids));
    args
}

/// Deletes the plans of `ids` that may still be pruned, with their tasks,
/// runs, events, logs, dependencies, notification claims, deliveries and
/// submission keys, in one transaction. A plan an action touched since the
/// scan is kept. At most [`BATCH`] ids; more are refused, nothing changed.
pub async fn plan_prune<D: Dialect>(d: &D, ids: &[i64], cutoff: Ts) -> Result<PruneReport> {
    if ids.len() > BATCH {
        return Err(StoreError::Invalid(format!(
            "at most {BATCH} plans are pruned in one transaction, not {}",
            ids.len()
        )));
    }
    if ids.is_empty() {
        return Ok(PruneReport::default());
    }
    let mut tx = d.begin().await?;
    // Lock every task of these plans, in id order, before the re-check:
    // an action on one of them (retry, skip, start) locks its rows first
    // too, so it either committed already (the re-check sees it) or waits
    // and then finds the rows gone.
    let lock = format!(
        "SELECT t.id FROM task t WHERE t.plan_id IN ({}) ORDER BY t.id {}",
        placeholders(1, ids.len()),
        D::row_lock(RowLock::Tasks)
    );
    D::fetch_all::<(i64,)>(&mut tx, Sql::built(lock), &id_args(ids)).await?;
    let recheck = format!(
        "SELECT id FROM plan WHERE {} AND id IN ({})",
        plan_may_go(ids.len() + 2),
        placeholders(2, ids.len())
    );
    let mut args = vec![cutoff.into()];
    args.extend(id_args(ids));
    args.push(keys_standing_since().into());
    let plans: Vec<(i64,)> = D::fetch_all(&mut tx, Sql::built(recheck), &args).await?;
    let plans: Vec<i64> = plans.into_iter().map(|(id,)| id).collect();
    let states: Vec<(i64, i64, i64, i64)> = if plans.is_empty() {
        Vec::new()
    } else {
        D::fetch_all(
            &mut tx,
            task_states_sql(plans.len()),
            &task_states_args(cutoff, &plans),
        )
        .await?
    };
    let gone: Vec<i64> = states
        .into_iter()
        .filter(|&(_, open, recent, _)| open == 0 && recent == 0)
        .map(|(plan_id, ..)| plan_id)
        .collect();
    if gone.is_empty() {
        return Ok(PruneReport::default());
    }
    let report = delete_plans::<D>(&mut tx, &gone).await?;
    D::commit(tx).await?;
    Ok(report)
}

/// Deletes the plans `ids` and what belongs to them, children first (so
/// SQLite's cascades find nothing left to do).
async fn delete_plans<D: Dialect>(tx: &mut D::Tx, ids: &[i64]) -> Result<PruneReport> {
    let plans = placeholders(1, ids.len());
    let args = id_args(ids);
    // A plan's runs: each task's latest run, and the attempts before it.
    // A new attempt is only ever made for a FAILED or CANCELED task, so
    // every earlier attempt ended FAILED or CANCELED, and
    // `task_run_ended_badly (ended_badly_plan)` finds them. No index on all of a
    // plan's runs is needed (each would cost the hot path an entry per
    // status change).
    let runs: Vec<(i64,)> = D::fetch_all(
        tx,
        Sql::built(format!(
            "SELECT latest_run_id FROM task WHERE plan_id IN ({plans}) AND latest_run_id IS NOT NULL
             UNION
             SELECT id FROM task_run WHERE ended_badly_plan IN ({plans})"
        )),
        &args,
    )
    .await?;
    let runs: Vec<i64> = runs.into_iter().map(|(id,)| id).collect();
    let mut report = PruneReport {
        plans: ids.len() as u64,
        ..Default::default()
    };
    for chunk in runs.chunks(BATCH) {
        let list = placeholders(1, chunk.len());
        let chunk_args = id_args(chunk);
        report.logs +=
            delete::<D>(tx, format!("run_log WHERE run_id IN ({list})"), &chunk_args).await?;
        // Events stamped on the runs' rows go with them, and count.
        let stamped: Vec<(i64,)> = D::fetch_all(
            tx,
            Sql::built(format!(
                "SELECT {} FROM task_run WHERE id IN ({list})",
                history_sql::stamps_counted_sql!()
            )),
            &chunk_args,
        )
        .await?;
        report.events += stamped.first().map_or(0, |(n,)| *n as u64);
        report.events += delete::<D>(
            tx,
            format!("run_event WHERE run_id IN ({list})"),
            &chunk_args,
        )
        .await?;
        D::finishes_forgotten(tx, chunk).await?;
        report.runs +=
            delete::<D>(tx, format!("task_run WHERE id IN ({list})"), &chunk_args).await?;
    }
    delete::<D>(
        tx,
        format!(
            "task_dependency WHERE task_id IN (SELECT id FROM task WHERE plan_id IN ({plans}))"
        ),
        &args,
    )
    .await?;
    report.tasks = delete::<D>(tx, format!("task WHERE plan_id IN ({plans})"), &args).await?;
    delete::<D>(
        tx,
        format!(
            "delivery_attempt WHERE delivery_id IN (SELECT id FROM delivery WHERE plan_id IN ({plans}))"
        ),
        &args,
    )
    .await?;
    report.deliveries =
        delete::<D>(tx, format!("delivery WHERE plan_id IN ({plans})"), &args).await?;
    delete::<D>(
        tx,
        format!("notification_claim WHERE plan_id IN ({plans})"),
        &args,
    )
    .await?;
    delete::<D>(
        tx,
        format!("plan_submission WHERE plan_id IN ({plans})"),
        &args,
    )
    .await?;
    delete::<D>(tx, format!("plan WHERE id IN ({plans})"), &args).await?;
    Ok(report)
}

async fn delete<D: Dialect>(
    tx: &mut D::Tx,
    from: String,
    args: &[super::Arg<'static>],
) -> Result<u64> {
    D::execute(tx, Sql::built(format!("DELETE FROM {from}")), args).await
}
