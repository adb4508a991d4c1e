//! Operator actions on plans and tasks (docs/design.md, "Operator
//! actions"): start, retry, cancel and skip, with the status each needs and
//! the refusal when it does not apply.

pub mod bulk;
pub mod plan_bulk;

use crate::store::engine::audit::Asked;
use crate::store::engine::execution::outcomes;
use crate::store::engine::gates::dependencies;
use crate::store::engine::notifications::{self, PlanOutcomes};
use crate::store::engine::plans::new_runs::create_runs;
use crate::store::engine::reads::rows::{self, PlanTasks};
use crate::store::engine::{Arg, Dialect, RowLock, Sql, optional};
use crate::store::signals::Signal;
use crate::store::{Actor, Result, StoreError};
use domain::time::Ts;

/// Creates PENDING runs for every NOT_STARTED task of the plan.
pub async fn plan_start<D: Dialect>(d: &D, id: i64, asked: &Asked<'_>, now: Ts) -> Result<()> {
    plan_new_attempts(d, id, PlanTasks::NotStarted, asked, now).await
}

/// New attempts for every FAILED or CANCELED task of the plan.
pub async fn plan_retry<D: Dialect>(d: &D, id: i64, asked: &Asked<'_>, now: Ts) -> Result<()> {
    plan_new_attempts(d, id, PlanTasks::FailedOrCanceled, asked, now).await
}

/// Cancels every live run of the plan in one transaction.
pub async fn plan_cancel<D: Dialect>(d: &D, id: i64, asked: &Asked<'_>, now: Ts) -> Result<()> {
    let actor = asked.by.name;
    retrying_deadlocks::<D, _, _, _>(|| async move {
        let mut tx = d.begin().await?;
        plan_exists::<D>(&mut tx, id).await?;
        // A live run is always its task's latest, so the plan's tasks
        // lead to them: `task_run` has no index by plan, and on PostgreSQL
        // the plain `plan_id = $1` read scanned it whole (25 ms at 200,000
        // runs, in the cancel's transaction; 0.07 ms this way).
        let live: Vec<(i64,)> = D::fetch_all(
            &mut tx,
            "SELECT r.id FROM task t JOIN task_run r ON r.id = t.latest_run_id
             WHERE t.plan_id = $1 AND r.status IN ('PENDING', 'AVAILABLE', 'RUNNING')"
                .into(),
            &[id.into()],
        )
        .await?;
        let live: Vec<i64> = live.into_iter().map(|(id,)| id).collect();
        let canceled = cancel_runs::<D>(&mut tx, &live, actor, now).await?;
        if canceled == 0 {
            return Err(StoreError::Conflict(format!(
                "plan {id} has nothing PENDING, AVAILABLE or RUNNING to cancel \
                 (a RUNNING run already being canceled is waiting for its replica)"
            )));
        }
        asked.done::<D>(&mut tx, &run_count(canceled), now).await?;
        D::commit(tx).await?;
        d.signals().raise(Signal::Canceled);
        d.signals().raise(Signal::Changed);
        Ok(())
    })
    .await
}

/// New attempt of a FAILED or CANCELED task; returns its plan id.
pub async fn task_retry<D: Dialect>(d: &D, id: i64, asked: &Asked<'_>, now: Ts) -> Result<i64> {
    let actor = asked.by.name;
    let mut tx = d.begin().await?;
    let task = task_lock::<D>(&mut tx, id).await?;
    if task.status != "FAILED" && task.status != "CANCELED" {
        return Err(StoreError::Conflict(format!(
            "task {id} is {}; only FAILED or CANCELED tasks can be retried",
            task.status
        )));
    }
    let detail = format!("retried by {actor}");
    let created = create_runs::<D>(&mut tx, &[id], &[None], actor, &detail, now).await?;
    new_phase::<D>(&mut tx, task.plan_id).await?;
    let was = format!("was {}; new run {}", task.status, created[0]);
    asked.done::<D>(&mut tx, &was, now).await?;
    D::commit(tx).await?;
    d.signals().raise(Signal::Changed);
    Ok(task.plan_id)
}

/// Cancels the task's PENDING or AVAILABLE run, or asks its replica to
/// stop its RUNNING one; returns its plan id.
pub async fn task_cancel<D: Dialect>(d: &D, id: i64, asked: &Asked<'_>, now: Ts) -> Result<i64> {
    let actor = asked.by.name;
    let mut tx = d.begin().await?;
    let task = task_lock::<D>(&mut tx, id).await?;
    let live = matches!(task.status.as_str(), "PENDING" | "AVAILABLE" | "RUNNING");
    let (true, Some(run)) = (live, task.run_id) else {
        return Err(StoreError::Conflict(format!(
            "task {id} is {}; only PENDING, AVAILABLE or RUNNING tasks can be canceled",
            task.status
        )));
    };
    if cancel_runs::<D>(&mut tx, &[run], actor, now).await? == 0 {
        return Err(StoreError::Conflict(format!(
            "task {id} is already being canceled: run {run} is waiting for its replica to stop it"
        )));
    }
    let was = match task.status.as_str() {
        "RUNNING" => format!("run {run} was RUNNING; its replica was asked to stop it"),
        status => format!("run {run} was {status}"),
    };
    asked.done::<D>(&mut tx, &was, now).await?;
    D::commit(tx).await?;
    d.signals().raise(Signal::Canceled);
    d.signals().raise(Signal::Changed);
    Ok(task.plan_id)
}

/// Marks a NOT_STARTED, FAILED or CANCELED task SKIPPED; returns its plan id.
pub async fn task_skip<D: Dialect>(d: &D, id: i64, asked: &Asked<'_>, now: Ts) -> Result<i64> {
    let actor = asked.by.name;
    let mut tx = d.begin().await?;
    let task = task_lock::<D>(&mut tx, id).await?;
    if !matches!(task.status.as_str(), "NOT_STARTED" | "FAILED" | "CANCELED") {
        return Err(StoreError::Conflict(format!(
            "task {id} is {}; only NOT_STARTED, FAILED or CANCELED tasks can be skipped",
            task.status
        )));
    }
    D::execute(
        &mut tx,
        rows::TASK_SKIP.into(),
        &[id.into(), now.into(), actor.into()],
    )
    .await?;
    // A skipped task releases what waits for it: its dependents, and the
    // larger versions its failure halted.
    dependencies::completed::<D>(&mut tx, &[id], now).await?;
    if task.status != "NOT_STARTED" {
        // Skipping a failure decides it, as a Retry does: a new phase, so
        // the plan's completion is notified (docs/design.md,
        // "Notifications") even though its failure was already (the claim
        // allows one event a phase).
        new_phase::<D>(&mut tx, task.plan_id).await?;
    }
    D::announce(&mut tx, Signal::Changed).await?;
    let progressed = PlanOutcomes {
        progressed: vec![task.plan_id],
        ..Default::default()
    };
    let targets = d.notify_targets();
    let notified = outcomes::notify_plans::<D>(&mut tx, &targets, progressed, now).await?;
    let queued = outcomes::announce_deliveries::<D>(&mut tx, &notified).await?;
    asked
        .done::<D>(&mut tx, &format!("was {}", task.status), now)
        .await?;
    D::commit(tx).await?;
    d.signals().raise(Signal::Changed);
    if queued {
        d.signals().raise(Signal::Deliveries);
    }
    Ok(task.plan_id)
}

/// `start` and `retry` of a whole plan: a new attempt for each task in
/// `which`, or a conflict when there is none.
async fn plan_new_attempts<D: Dialect>(
    d: &D,
    id: i64,
    which: PlanTasks,
    asked: &Asked<'_>,
    now: Ts,
) -> Result<()> {
    retrying_deadlocks::<D, _, _, _>(|| async move {
        let mut tx = d.begin().await?;
        plan_exists::<D>(&mut tx, id).await?;
        let tasks = new_attempts_in::<D>(&mut tx, id, which, asked.by.name, now).await?;
        if tasks == 0 {
            return Err(which.none_left(id));
        }
        let detail = format!("{tasks} {}", if tasks == 1 { "task" } else { "tasks" });
        asked.done::<D>(&mut tx, &detail, now).await?;
        D::commit(tx).await?;
        d.signals().raise(Signal::Changed);
        Ok(())
    })
    .await
}

/// Starts plan `id`'s NOT_STARTED tasks in `tx` (a queued scheduled plan
/// whose turn came); `false` when it had none left.
pub async fn plan_start_in<D: Dialect>(
    tx: &mut D::Tx,
    id: i64,
    actor: Actor<'_>,
    now: Ts,
) -> Result<bool> {
    Ok(new_attempts_in::<D>(tx, id, PlanTasks::NotStarted, actor, now).await? > 0)
}

/// How many tasks got a new attempt.
async fn new_attempts_in<D: Dialect>(
    tx: &mut D::Tx,
    id: i64,
    which: PlanTasks,
    actor: Actor<'_>,
    now: Ts,
) -> Result<usize> {
    if matches!(which, PlanTasks::NotStarted) {
        // Started early by an operator or in its turn: it waits no more.
        D::execute(
            tx,
            "UPDATE plan SET queued = FALSE WHERE id = $1 AND queued".into(),
            &[id.into()],
        )
        .await?;
    }
    // Every task of the plan that is not skipped, as any of them may be
    // one to start or retry: locked first, read after (`lock_tasks`).
    lock_tasks::<D>(tx, "t.plan_id = $1 AND t.skipped_at IS NULL", &[id.into()]).await?;
    let tasks: Vec<(i64,)> = D::fetch_all(tx, Sql::built(which.select_sql()), &[id.into()]).await?;
    if tasks.is_empty() {
        return Ok(0);
    }
    let tasks: Vec<i64> = tasks.into_iter().map(|(id,)| id).collect();
    let run_at = vec![None; tasks.len()];
    let detail = which.detail(actor);
    create_runs::<D>(tx, &tasks, &run_at, actor, &detail, now).await?;
    new_phase::<D>(tx, id).await?;
    Ok(tasks.len())
}

/// "1 run", "5 runs": an audit entry's detail.
pub fn run_count(n: u64) -> String {
    format!("{n} {}", if n == 1 { "run" } else { "runs" })
}

/// [`Dialect::runs_cancel`], announced: a RUNNING run's replica hears it
/// and stops the execution (or notices through its fence).
pub async fn cancel_runs<D: Dialect>(
    tx: &mut D::Tx,
    run_ids: &[i64],
    actor: Actor<'_>,
    now: Ts,
) -> Result<u64> {
    let moved = D::runs_cancel(tx, run_ids, actor, now).await?;
    dependencies::runs_changed::<D>(tx, run_ids, now).await?;
    D::announce(tx, Signal::Canceled).await?;
    D::announce(tx, Signal::Changed).await?;
    Ok(moved)
}

/// A retry or a start begins a new phase of the plan: its failure or
/// completion notifies again (docs/design.md, "Notifications").
pub async fn new_phase<D: Dialect>(tx: &mut D::Tx, plan_id: i64) -> Result<()> {
    D::execute(tx, notifications::CLAIM_DELETE.into(), &[plan_id.into()]).await?;
    Ok(())
}

/// No row lock: a plan action holding the plan row while it locks runs
/// would invert the order of a finish, which locks its runs and then the
/// plan row (`notify_plans`). Retention deletes a plan only with its task
/// rows locked, so an action that gets past this check and then locks
/// tasks either finds them (the prune waits, re-checks and keeps the plan)
/// or finds none and says so.
async fn plan_exists<D: Dialect>(tx: &mut D::Tx, id: i64) -> Result<()> {
    let found: Option<(i64,)> =
        optional::<D, _>(tx, "SELECT id FROM plan WHERE id = $1", &[id.into()]).await?;
    found
        .map(|_| ())
        .ok_or(StoreError::NotFound { what: "plan", id })
}

/// A task's plan, status and latest run.
#[derive(sqlx::FromRow)]
struct TaskState {
    plan_id: i64,
    status: String,
    run_id: Option<i64>,
}

/// Locks the tasks `which` selects (a condition on `task t`), in id order;
/// the caller reads their state in a statement of its own after this.
///
/// One statement that locks tasks as it joins their latest runs is wrong
/// on PostgreSQL: once a lock is granted it re-checks the task's new row
/// but keeps the run it joined before (EvalPlanQual), so an action that
/// waited behind a Retry saw the task as it was before the Retry's run. A
/// racing Skip marked a running task SKIPPED (its dependents started
/// beside it), and four racing Runs of a plan ran its task four times
/// (hostile trial). A read after the locks sees what was committed before
/// they were granted. Returns the ids locked.
pub(super) async fn lock_tasks<D: Dialect>(
    tx: &mut D::Tx,
    which: &str,
    args: &[Arg<'_>],
) -> Result<Vec<i64>> {
    let lock = format!(
        "SELECT t.id FROM task t WHERE {which} ORDER BY t.id {}",
        D::row_lock(RowLock::Tasks)
    );
    let ids: Vec<(i64,)> = D::fetch_all(tx, Sql::built(lock), args).await?;
    Ok(ids.into_iter().map(|(id,)| id).collect())
}

/// [`lock_tasks`] of task `id`; `NotFound` when there is none.
pub(super) async fn lock_task<D: Dialect>(tx: &mut D::Tx, id: i64) -> Result<()> {
    match lock_tasks::<D>(tx, "t.id = $1", &[id.into()])
        .await?
        .is_empty()
    {
        true => Err(StoreError::NotFound { what: "task", id }),
        false => Ok(()),
    }
}

/// The task's state, with its row locked so two actions on one task
/// serialise.
async fn task_lock<D: Dialect>(tx: &mut D::Tx, id: i64) -> Result<TaskState> {
    lock_task::<D>(tx, id).await?;
    optional::<D, TaskState>(tx, Sql::from(rows::TASK_STATE), &[id.into()])
        .await?
        .ok_or(StoreError::NotFound { what: "task", id })
}

/// Runs `attempt` again when the database broke a deadlock by failing it.
/// Plan-wide and bulk actions lock many runs; a finish batch or a claim
/// may hold some of them, and whichever order each takes, a cycle can
/// form on a plan of thousands of tasks (a 40,000-task cancel once
/// answered 500). Each attempt is a whole transaction, so a retry is safe.
pub(super) async fn retrying_deadlocks<D, T, F, Fut>(mut attempt: F) -> Result<T>
where
    D: Dialect,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    const TRIES: u32 = 5;
    let mut tried = 1;
    loop {
        match attempt().await {
            Err(e) if D::is_deadlock(&e) && tried < TRIES => {
                tracing::warn!(tried, "deadlock broken by the database; trying again");
                tokio::time::sleep(std::time::Duration::from_millis(20 * u64::from(tried))).await;
                tried += 1;
            }
            other => return other,
        }
    }
}

/// Two actions racing on one task both try to create its next attempt; the
/// unique (task, attempt) key fails the second, whose actor is told to
/// look again rather than shown a database error.
pub fn raced<T>(result: Result<T>) -> Result<T> {
    match result {
        Err(StoreError::Database(sqlx::Error::Database(db))) if db.is_unique_violation() => {
            Err(StoreError::Conflict(
                "another action changed this task at the same moment; reload and try again".into(),
            ))
        }
        other => other,
    }
}
