//! What follows runs leaving RUNNING (a finish, a sweep) or a task leaving
//! its plan's open count (a skip): the automatic retry, then the plan's
//! notification claim and its outbox rows (docs/design.md,
//! "Notifications"), in the caller's transaction.
//!
//! Serialised per plan by the row lock of `notifications::PLAN_PROGRESS` (on
//! SQLite by the write lock). A transaction takes plan rows last (after
//! its runs and tasks) and in id order, and no transaction that holds one
//! waits for runs or tasks, so these locks cannot close a cycle.

use crate::store::engine::gates::dependencies;
use crate::store::engine::plans::new_runs;
use crate::store::engine::{Dialect, one};
use std::collections::HashSet;

use domain::model::RunStatus;

use crate::store::engine::notifications::{
    self, Notified, NotifyTargets, PIPELINE_COMPLETED, PIPELINE_FAILED, PlanOutcomes,
};
use crate::store::engine::reads::rows::{self, FinishedRow};
use crate::store::signals::Signal;
use crate::store::{Finish, FinishReport, Result, SCHEDULER, retry_backoff};
use domain::time::Ts;

/// The next attempt of each failure with attempts left, then the
/// notifications the outcomes call for. Returns both.
pub async fn runs_ended<D: Dialect>(
    tx: &mut D::Tx,
    targets: &NotifyTargets,
    done: &[FinishedRow],
    now: Ts,
) -> Result<(Vec<i64>, Vec<Notified>)> {
    let (retry_tasks, retry_at) = retries(done, now);
    let retried = new_runs::create_runs::<D>(
        tx,
        &retry_tasks,
        &retry_at,
        SCHEDULER,
        "automatic retry",
        now,
    )
    .await?;
    // Before the plan rows below: dependents' task rows are locked here,
    // and plan rows are always taken last.
    dependencies_moved::<D>(tx, done, now).await?;
    let outcomes = plan_outcomes(done);
    let notified = notify_plans::<D>(tx, targets, outcomes, now).await?;
    Ok((retried, notified))
}

/// Tasks others wait for: a DONE one releases them; one that failed for
/// good or was canceled shows in their causes (one with attempts left has
/// a new run, which `create_runs` announced).
async fn dependencies_moved<D: Dialect>(
    tx: &mut D::Tx,
    done: &[FinishedRow],
    now: Ts,
) -> Result<()> {
    let awaited = done.iter().filter(|d| d.dependents);
    let (completed, failed): (Vec<&FinishedRow>, Vec<&FinishedRow>) =
        awaited.partition(|d| d.status == RunStatus::Done.as_str());
    let failed: Vec<i64> = failed
        .into_iter()
        .filter(|d| d.attempt >= d.max_attempts || d.status == RunStatus::Canceled.as_str())
        .map(|d| d.task_id)
        .collect();
    let completed: Vec<i64> = completed.into_iter().map(|d| d.task_id).collect();
    if !completed.is_empty() {
        dependencies::completed::<D>(tx, &completed, now).await?;
    }
    if !failed.is_empty() {
        dependencies::changed::<D>(tx, &failed, now).await?;
    }
    Ok(())
}

/// Which asked-for runs finished and which were fenced out (this replica
/// no longer owned them: nothing was written for those).
pub fn finish_report(done: &[FinishedRow], asked: &[Finish]) -> FinishReport {
    let finished: Vec<i64> = done.iter().map(|d| d.id).collect();
    let moved: HashSet<i64> = finished.iter().copied().collect();
    let fenced = asked
        .iter()
        .map(|f| f.run_id)
        .filter(|id| !moved.contains(id))
        .collect();
    FinishReport {
        finished,
        fenced,
        ..Default::default()
    }
}

/// Failed runs with attempts left, and when their retry may start: after
/// [`retry_backoff`] of the attempt that failed.
fn retries(done: &[FinishedRow], now: Ts) -> (Vec<i64>, Vec<Option<Ts>>) {
    done.iter()
        .filter(|d| d.status == RunStatus::Failed.as_str() && d.attempt < d.max_attempts)
        .map(|d| (d.task_id, Some(now.plus(retry_backoff(d.attempt)))))
        .unzip()
}

/// The plans these runs completed a task of (DONE), or failed for good (a
/// FAILED run with no attempt left).
fn plan_outcomes(done: &[FinishedRow]) -> PlanOutcomes {
    let mut outcomes = PlanOutcomes::default();
    for d in done {
        if d.status == RunStatus::Done.as_str() {
            outcomes.progressed.push(d.plan_id);
        } else if d.status == RunStatus::Failed.as_str() && d.attempt >= d.max_attempts {
            outcomes.failed.push(d.plan_id);
        }
    }
    outcomes
}

/// Keeps each plan's open-task count and claims and queues the
/// notifications `outcomes` call for.
///
/// Every completed task leaves its plan's count, whether or not the plan
/// has notified already, so the count stays exact across Retries.
pub async fn notify_plans<D: Dialect>(
    tx: &mut D::Tx,
    targets: &NotifyTargets,
    outcomes: PlanOutcomes,
    now: Ts,
) -> Result<Vec<Notified>> {
    let mut notified = Vec::new();
    for plan in outcomes.by_plan() {
        let mut complete = false;
        if plan.completed_tasks > 0 {
            let (open,): (i64,) = one::<D, _>(
                tx,
                notifications::PLAN_PROGRESS,
                &[plan.plan_id.into(), plan.completed_tasks.into()],
            )
            .await?;
            complete = open == 0;
        }
        // A plan that both failed and progressed in one batch failed.
        let event = match (plan.failed, complete) {
            (true, _) => PIPELINE_FAILED,
            (false, true) => PIPELINE_COMPLETED,
            (false, false) => continue,
        };
        // The claim's primary key decides: a plan that has notified for
        // this phase inserts nothing.
        let won = D::execute(
            tx,
            notifications::CLAIM_INSERT.into(),
            &[plan.plan_id.into(), event.into(), now.into()],
        )
        .await?;
        if won == 0 {
            continue;
        }
        let deliveries = outbox_write::<D>(tx, targets, plan.plan_id, event, now).await?;
        notified.push(Notified {
            plan_id: plan.plan_id,
            event,
            deliveries,
        });
    }
    Ok(notified)
}

/// Tells the other replicas' deliverers when `notified` queued any
/// delivery, and says whether it did (the caller raises the local signal
/// after commit).
pub async fn announce_deliveries<D: Dialect>(
    tx: &mut D::Tx,
    notified: &[Notified],
) -> Result<bool> {
    let queued = notifications::any_queued(notified);
    if queued {
        D::announce(tx, Signal::Deliveries).await?;
    }
    Ok(queued)
}

/// One outbox row per destination, carrying the payload; how many.
///
/// With no destination (no `BATON_WEBHOOK_URL`, no webhooks on the plan)
/// there is no payload to build: reading the plan's every task for it
/// would cost a plan-sized read inside the finish's transaction for
/// nothing.
async fn outbox_write<D: Dialect>(
    tx: &mut D::Tx,
    targets: &NotifyTargets,
    plan_id: i64,
    event: &str,
    now: Ts,
) -> Result<usize> {
    let (webhooks,): (String,) =
        one::<D, _>(tx, notifications::PLAN_WEBHOOKS, &[plan_id.into()]).await?;
    let destinations = notifications::destinations(targets, &webhooks);
    if destinations.is_empty() {
        return Ok(0);
    }
    let plan: rows::PlanRow = one::<D, _>(tx, rows::PLAN_GET, &[plan_id.into()]).await?;
    let tasks: Vec<rows::TaskRow> =
        D::fetch_all(tx, rows::PLAN_TASKS.into(), &[plan_id.into()]).await?;
    let view = rows::plan_view(plan, tasks, None)?;
    let body = notifications::payload(event, &view, &targets.public_url, now);
    let queued = destinations.len();
    for (i, to) in destinations.into_iter().enumerate() {
        let key = notifications::delivery_key(plan_id, event, now, i);
        let destination = notifications::destination(&to.url);
        D::execute(
            tx,
            notifications::DELIVERY_INSERT.into(),
            &[
                key.as_str().into(),
                plan_id.into(),
                event.into(),
                to.url.as_str().into(),
                (&to.secret).into(),
                body.as_str().into(),
                now.into(),
                destination.as_str().into(),
            ],
        )
        .await?;
    }
    Ok(queued)
}
