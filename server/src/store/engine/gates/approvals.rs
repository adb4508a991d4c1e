//! Gate 7 (docs/design.md, "Gates"): a task that requires approval waits
//! until an operator approves it. `approvers` restricts who may;
//! `two-person` needs someone other than the plan's submitter. A stage's
//! approval approves every task of the stage at once.

use crate::plan::{Approval, Stage};
use crate::store::engine::actions::{lock_task, lock_tasks};
use crate::store::engine::audit::Asked;
use crate::store::engine::{Arg, BATCH, Dialect, Sql, id_args, optional, placeholders};
use crate::store::signals::Signal;
use crate::store::{Actor, Result, StoreError};
use domain::time::Ts;

/// A task as an approval needs it, locked.
#[derive(sqlx::FromRow)]
struct Approvable {
    id: i64,
    plan_id: i64,
    approval: Option<String>,
    approvers: Option<String>,
    approved_by: Option<String>,
    approved_at: Option<Ts>,
    stage: Option<String>,
    run_id: Option<i64>,
    run_status: Option<String>,
    approval_pending: Option<bool>,
    submitted_by: String,
    stages: String,
}

const APPROVABLE: &str = "SELECT t.id, t.plan_id, t.approval, t.approvers, t.approved_by,
        t.approved_at, t.stage, r.id AS run_id, r.status AS run_status, r.approval_pending,
        p.created_by AS submitted_by, p.stages
    FROM task t JOIN plan p ON p.id = t.plan_id LEFT JOIN task_run r ON r.id = t.latest_run_id";

/// Approves task `id` (and, for a stage's approval, its whole stage);
/// returns the plan id and how many tasks were approved.
pub async fn task_approve<D: Dialect>(
    d: &D,
    id: i64,
    asked: &Asked<'_>,
    now: Ts,
) -> Result<(i64, usize)> {
    let actor = asked.by.name;
    let mut tx = d.begin().await?;
    // Locked, then read: the read must see the task's current run.
    lock_task::<D>(&mut tx, id).await?;
    let sql = format!("{APPROVABLE} WHERE t.id = $1");
    let task: Approvable = optional::<D, _>(&mut tx, Sql::built(sql), &[id.into()])
        .await?
        .ok_or(StoreError::NotFound { what: "task", id })?;
    may_approve(&task, actor)?;
    let mut ids = vec![task.id];
    let stages: Vec<Stage> = serde_json::from_str(&task.stages).unwrap_or_default();
    // The stage's rule, when the task is held by it rather than by an
    // approval of its own ("a task's own approval wins over its stage's").
    let stage_rule = task
        .stage
        .as_deref()
        .and_then(|s| stages.iter().find(|st| st.name == s))
        .and_then(|st| st.approval.as_ref())
        .filter(|rule| task.rule().as_ref() == Some(*rule));
    if let Some(stage_rule) = stage_rule {
        let which = "t.plan_id = $1 AND t.stage = $2 AND t.id <> $3
                AND t.approval IS NOT NULL AND t.approved_by IS NULL";
        let args: [Arg<'_>; 3] = [task.plan_id.into(), task.stage.as_deref().into(), id.into()];
        lock_tasks::<D>(&mut tx, which, &args).await?;
        let sql = format!("{APPROVABLE} WHERE {which} ORDER BY t.id");
        let others: Vec<Approvable> = D::fetch_all(
            &mut tx,
            Sql::built(sql),
            &[task.plan_id.into(), task.stage.as_deref().into(), id.into()],
        )
        .await?;
        // Only the tasks the stage's rule holds: one with a stricter rule
        // of its own (other approvers, two people) is approved under that
        // rule, by its own request, never along with its stage.
        ids.extend(
            others
                .iter()
                .filter(|t| t.rule().as_ref() == Some(stage_rule))
                .map(|t| t.id),
        );
    }
    let approved = approve_write::<D>(&mut tx, &ids, actor, now).await?;
    asked
        .done::<D>(&mut tx, &approved_count(approved), now)
        .await?;
    D::commit(tx).await?;
    d.signals().raise(Signal::Changed);
    Ok((task.plan_id, approved))
}

/// Approves every task of plan `id` whose run waits for approval now;
/// how many. Refused whole when the actor may not approve one of them.
pub async fn plan_approve<D: Dialect>(d: &D, id: i64, asked: &Asked<'_>, now: Ts) -> Result<usize> {
    let actor = asked.by.name;
    let mut tx = d.begin().await?;
    // Locked, then read (see `actions::lock_tasks`).
    let which = "t.plan_id = $1 AND t.approval IS NOT NULL AND t.approved_by IS NULL";
    lock_tasks::<D>(&mut tx, which, &[id.into()]).await?;
    let sql = format!(
        "{APPROVABLE} WHERE t.plan_id = $1 AND t.approval IS NOT NULL AND t.approved_by IS NULL
            AND r.status = 'PENDING' AND r.approval_pending ORDER BY t.id"
    );
    let waiting: Vec<Approvable> = D::fetch_all(&mut tx, Sql::built(sql), &[id.into()]).await?;
    if waiting.is_empty() {
        let found: Option<(i64,)> =
            optional::<D, _>(&mut tx, "SELECT id FROM plan WHERE id = $1", &[id.into()]).await?;
        found.ok_or(StoreError::NotFound { what: "plan", id })?;
        return Err(StoreError::Conflict(format!(
            "plan {id} has no task waiting for approval"
        )));
    }
    for task in &waiting {
        may_approve(task, actor)?;
    }
    let ids: Vec<i64> = waiting.iter().map(|t| t.id).collect();
    let approved = approve_write::<D>(&mut tx, &ids, actor, now).await?;
    asked
        .done::<D>(&mut tx, &approved_count(approved), now)
        .await?;
    D::commit(tx).await?;
    d.signals().raise(Signal::Changed);
    Ok(approved)
}

impl Approvable {
    /// The approval rule the task's row holds, as the plan file gave it.
    fn rule(&self) -> Option<Approval> {
        let kind = self.approval.as_deref()?;
        let approvers = self
            .approvers
            .as_deref()
            .and_then(|a| serde_json::from_str(a).ok())
            .unwrap_or_default();
        Some(Approval {
            two_person: kind == "two-person",
            approvers,
        })
    }
}

/// "1 task approved", an audit entry's detail.
fn approved_count(n: usize) -> String {
    format!("{n} {} approved", if n == 1 { "task" } else { "tasks" })
}

/// The refusals: nothing to approve (409), or not this actor (403).
fn may_approve(task: &Approvable, actor: Actor<'_>) -> Result<()> {
    let id = task.id;
    let Some(kind) = task.approval.as_deref() else {
        return Err(StoreError::Conflict(format!(
            "task {id} does not require approval"
        )));
    };
    if let Some(by) = &task.approved_by {
        let at = task
            .approved_at
            .map(|at| format!(" at {}", at.0.format("%Y-%m-%d %H:%M:%SZ")));
        return Err(StoreError::Conflict(format!(
            "task {id} was already approved by {by}{}",
            at.unwrap_or_default()
        )));
    }
    let waiting =
        task.run_status.as_deref() == Some("PENDING") && task.approval_pending == Some(true);
    if !waiting {
        let status = match (&task.run_id, task.run_status.as_deref()) {
            (None, _) => "NOT_STARTED",
            (_, Some(status)) => status,
            _ => "unknown",
        };
        return Err(StoreError::Conflict(format!(
            "task {id} is {status}, not waiting for approval; only a PENDING task can be approved"
        )));
    }
    let approvers: Vec<String> = task
        .approvers
        .as_deref()
        .and_then(|a| serde_json::from_str(a).ok())
        .unwrap_or_default();
    if !approvers.is_empty() && !approvers.iter().any(|a| a == actor) {
        return Err(StoreError::Forbidden(format!(
            "only {} may approve task {id}",
            approvers.join(", ")
        )));
    }
    if kind == "two-person" && task.submitted_by == actor {
        return Err(StoreError::Forbidden(format!(
            "task {id} needs two people: {actor} submitted the plan, so someone else must approve"
        )));
    }
    Ok(())
}

/// Marks the tasks approved, releases their PENDING runs from the gate and
/// records an event on each run with who approved.
async fn approve_write<D: Dialect>(
    tx: &mut D::Tx,
    tasks: &[i64],
    actor: Actor<'_>,
    now: Ts,
) -> Result<usize> {
    let mut approved = 0;
    let detail = format!("approved by {actor}");
    let cause = format!("{detail}; {}", domain::gates::CAUSE_NEW);
    for chunk in tasks.chunks(BATCH) {
        let mut args: Vec<Arg> = vec![actor.into(), now.into()];
        args.extend(id_args(chunk));
        approved += D::execute(
            tx,
            Sql::built(format!(
                "UPDATE task SET approved_by = $1, approved_at = $2
                 WHERE approved_by IS NULL AND id IN ({})",
                placeholders(3, chunk.len())
            )),
            &args,
        )
        .await?;
        let mut args: Vec<Arg> = vec![actor.into(), now.into(), detail.as_str().into()];
        args.extend(id_args(chunk));
        D::execute(
            tx,
            Sql::built(format!(
                "INSERT INTO run_event (run_id, from_status, to_status, actor, at, detail)
                 SELECT r.id, 'PENDING', 'PENDING', $1, $2, $3
                 FROM task t JOIN task_run r ON r.id = t.latest_run_id
                 WHERE t.id IN ({}) AND r.status = 'PENDING' AND r.approval_pending",
                placeholders(4, chunk.len())
            )),
            &args,
        )
        .await?;
        // Its cause says so at once, not "waits for approval" until the
        // next round judges it: what the operator reads right after
        // approving (the answer to the approve, `baton approve`).
        let mut args: Vec<Arg> = vec![cause.as_str().into()];
        args.extend(id_args(chunk));
        D::execute(
            tx,
            Sql::built(format!(
                "UPDATE task_run SET approval_pending = FALSE, waiting_cause = $1
                 WHERE status = 'PENDING' AND approval_pending
                    AND id IN (SELECT latest_run_id FROM task WHERE id IN ({}))",
                placeholders(2, chunk.len())
            )),
            &args,
        )
        .await?;
    }
    D::announce(tx, Signal::Changed).await?;
    Ok(approved as usize)
}

/// Plans whose PENDING runs wait for approval and for nothing else (not
/// held by a dependency), oldest plan first: `(plan, name, runs)`.
pub async fn approvals_waiting<D: Dialect>(d: &D, limit: i64) -> Result<Vec<(i64, String, i64)>> {
    d.read(
        "SELECT r.plan_id, p.name, COUNT(*) FROM task_run r JOIN plan p ON p.id = r.plan_id
         WHERE r.pending_held = 0 AND r.approval_pending
         GROUP BY r.plan_id, p.name ORDER BY r.plan_id LIMIT $1"
            .into(),
        &[limit.into()],
    )
    .await
}
