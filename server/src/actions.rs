//! Operator actions on plans and tasks, as the API and the dashboard both
//! take them: one dispatch, so a button and its endpoint cannot drift.

use domain::views::Action;

use crate::store::{Result, Store};
use domain::audit::Person;
use domain::time::Ts;

/// Which kind of thing an action's id names, for messages.
pub fn subject(action: Action) -> &'static str {
    match action {
        Action::PlanRun
        | Action::PlanRetry
        | Action::PlanCancel
        | Action::PlanApprove
        | Action::PlanPause
        | Action::PlanResume => "plan",
        Action::TaskRetry | Action::TaskCancel | Action::TaskSkip | Action::TaskApprove => "task",
    }
}

/// Carries out `action` on plan or task `id` for `by`; the id of the plan
/// it touched.
pub async fn act(
    store: &dyn Store,
    action: Action,
    id: i64,
    by: Person<'_>,
    now: Ts,
) -> Result<i64> {
    match action {
        Action::PlanRun => store.plan_start(id, by, now).await.map(|()| id),
        Action::PlanRetry => store.plan_retry(id, by, now).await.map(|()| id),
        Action::PlanCancel => store.plan_cancel(id, by, now).await.map(|()| id),
        Action::TaskRetry => store.task_retry(id, by, now).await,
        Action::TaskCancel => store.task_cancel(id, by, now).await,
        Action::TaskSkip => store.task_skip(id, by, now).await,
        Action::TaskApprove => store.task_approve(id, by, now).await.map(|(plan, _)| plan),
        Action::PlanApprove => store.plan_approve(id, by, now).await.map(|_| id),
        Action::PlanPause => store.plan_pause(id, by, now).await.map(|()| id),
        Action::PlanResume => store.plan_resume(id, by, now).await.map(|()| id),
    }
}
