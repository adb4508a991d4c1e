//! Gate 6 (docs/design.md, "Gates"): a task starts only once every task it
//! depends on is DONE or SKIPPED.
//!
//! The promoter never reads a run whose task still waits for another
//! (`task_run.held`): in a 10,000-task chain nearly every run waits, and
//! reading them all in every round would make the chain quadratic. So the
//! rules live here, in the transactions that change a dependency:
//!
//! - a submit writes the edges, each task's count of open dependencies
//!   (`task.deps_open`) and which runs are held;
//! - a dependency that completes (DONE, or SKIPPED) marks its edges
//!   satisfied and lowers its dependents' counts; a run whose count
//!   reaches zero is released to the promoter;
//! - any other change of a dependency's status (promoted, claimed, failed,
//!   cancelled, retried) rewrites its held dependents' waiting causes,
//!   which name it and its status.
//!
//! Each change costs its own edges, never a plan's: the open edges of a
//! task are a partial index, and a failed dependency is found from the
//! plan's few ended-badly runs.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::plan::NewPlan;
use crate::store::engine::{Arg, BATCH, Dialect, RowLock, Sql, id_args, placeholders};
use crate::store::signals::Signal;
use crate::store::{Result, StoreError};
use domain::gates::Decisions;
use domain::time::Ts;

/// Writes what a submitted plan says beyond its tasks and runs: the
/// dependency edges, open counts, stages and approvals, and which of its
/// new runs are held or await approval. Only for plans that use them.
pub async fn plan_written<D: Dialect>(
    tx: &mut D::Tx,
    plan_id: i64,
    plan: &NewPlan,
    now: Ts,
) -> Result<()> {
    if !plan.writes_after_tasks() {
        return Ok(());
    }
    let rows: Vec<(i64, String)> = D::fetch_all(
        tx,
        "SELECT id, name FROM task WHERE plan_id = $1".into(),
        &[plan_id.into()],
    )
    .await?;
    let by_name: HashMap<&str, i64> = rows.iter().map(|(id, n)| (n.as_str(), *id)).collect();
    let ids = plan
        .tasks
        .iter()
        .map(|t| {
            by_name.get(t.name.as_str()).copied().ok_or_else(|| {
                StoreError::Corrupt(format!("task {} of plan {plan_id} was not stored", t.name))
            })
        })
        .collect::<Result<Vec<i64>>>()?;

    let edges: Vec<(i64, i64)> = plan
        .dependency_edges()
        .map(|(task, dep)| (ids[task], ids[dep]))
        .collect();
    for chunk in edges.chunks(BATCH) {
        let values = (0..chunk.len())
            .map(|k| format!("(${}, ${})", 2 * k + 1, 2 * k + 2))
            .collect::<Vec<_>>()
            .join(", ");
        let args: Vec<Arg> = chunk
            .iter()
            .flat_map(|&(task, dep)| [task.into(), dep.into()])
            .collect();
        D::execute(
            tx,
            Sql::built(format!(
                "INSERT INTO task_dependency (task_id, depends_on) VALUES {values}"
            )),
            &args,
        )
        .await?;
    }
    if !edges.is_empty() {
        D::execute(
            tx,
            "UPDATE task SET
                deps_open = (SELECT COUNT(*) FROM task_dependency e WHERE e.task_id = task.id),
                has_dependents = EXISTS (SELECT 1 FROM task_dependency e
                    WHERE e.depends_on = task.id)
             WHERE plan_id = $1"
                .into(),
            &[plan_id.into()],
        )
        .await?;
    }
    task_labels_write::<D>(tx, plan, &ids).await?;
    if !plan.stages.is_empty() {
        let stages = serde_json::to_string(&plan.stages)
            .map_err(|e| StoreError::Corrupt(format!("stages do not serialise: {e}")))?;
        D::execute(
            tx,
            "UPDATE plan SET stages = $2 WHERE id = $1".into(),
            &[plan_id.into(), stages.as_str().into()],
        )
        .await?;
    }
    if plan.start {
        D::execute(
            tx,
            "UPDATE task_run SET held = t.deps_open > 0, dependents = t.has_dependents,
                approval_pending = t.approval IS NOT NULL
             FROM task t
             WHERE t.id = task_run.task_id AND task_run.plan_id = $1
                AND (t.deps_open > 0 OR t.has_dependents OR t.approval IS NOT NULL)"
                .into(),
            &[plan_id.into()],
        )
        .await?;
        let waiting: Vec<i64> = plan
            .tasks
            .iter()
            .zip(&ids)
            .filter(|(t, _)| !t.depends_on.is_empty())
            .map(|(_, id)| *id)
            .collect();
        refresh::<D>(tx, &waiting, now).await?;
    }
    Ok(())
}

/// Each task's stage and approval, one statement per distinct value.
async fn task_labels_write<D: Dialect>(tx: &mut D::Tx, plan: &NewPlan, ids: &[i64]) -> Result<()> {
    // (stage, approval kind, approvers as JSON) → tasks.
    type Labels<'a> = (Option<&'a str>, Option<&'a str>, Option<String>);
    let mut groups: HashMap<Labels, Vec<i64>> = HashMap::new();
    for (task, &id) in plan.tasks.iter().zip(ids) {
        if task.stage.is_none() && task.approval.is_none() {
            continue;
        }
        let approvers = task
            .approval
            .as_ref()
            .filter(|a| !a.approvers.is_empty())
            .map(|a| serde_json::to_string(&a.approvers).unwrap_or_default());
        let key = (
            task.stage.as_deref(),
            task.approval.as_ref().map(|a| a.kind()),
            approvers,
        );
        groups.entry(key).or_default().push(id);
    }
    for ((stage, approval, approvers), tasks) in groups {
        for chunk in tasks.chunks(BATCH) {
            let mut args: Vec<Arg> = vec![stage.into(), approval.into(), (&approvers).into()];
            args.extend(id_args(chunk));
            D::execute(
                tx,
                Sql::built(format!(
                    "UPDATE task SET stage = $1, approval = $2, approvers = $3 WHERE id IN ({})",
                    placeholders(4, chunk.len())
                )),
                &args,
            )
            .await?;
        }
    }
    Ok(())
}

/// Tasks that just became DONE or SKIPPED: their edges are satisfied,
/// their dependents' counts fall, and a dependent whose last dependency
/// this was is released to the promoter. Returns whether any was (the
/// caller raises `Changed` after commit; the other replicas hear it from
/// here).
pub async fn completed<D: Dialect>(tx: &mut D::Tx, tasks: &[i64], now: Ts) -> Result<bool> {
    let mut released = 0;
    for chunk in tasks.chunks(BATCH) {
        let dependents = dependents_lock::<D>(tx, chunk).await?;
        if dependents.is_empty() {
            continue;
        }
        let list = placeholders(1, chunk.len());
        D::execute(
            tx,
            Sql::built(format!(
                "UPDATE task SET deps_open = deps_open - (SELECT COUNT(*) FROM task_dependency e
                    WHERE e.task_id = task.id AND NOT e.satisfied AND e.depends_on IN ({list}))
                 WHERE id IN (SELECT task_id FROM task_dependency
                    WHERE NOT satisfied AND depends_on IN ({list}))"
            )),
            &id_args(chunk),
        )
        .await?;
        D::execute(
            tx,
            Sql::built(format!(
                "UPDATE task_dependency SET satisfied = TRUE
                 WHERE NOT satisfied AND depends_on IN ({list})"
            )),
            &id_args(chunk),
        )
        .await?;
        for part in dependents.chunks(BATCH) {
            let mut args: Vec<Arg> = vec![domain::gates::CAUSE_NEW.into()];
            args.extend(id_args(part));
            released += D::execute(
                tx,
                Sql::built(format!(
                    "UPDATE task_run SET held = FALSE, waiting_cause = $1
                     WHERE status = 'PENDING' AND held AND id IN (
                        SELECT latest_run_id FROM task WHERE deps_open = 0 AND id IN ({}))",
                    placeholders(2, part.len())
                )),
                &args,
            )
            .await?;
        }
        refresh::<D>(tx, &dependents, now).await?;
    }
    if released > 0 {
        D::announce(tx, Signal::Changed).await?;
    }
    Ok(released > 0)
}

/// Tasks whose status changed without completing: their held dependents'
/// causes name the new status.
pub async fn changed<D: Dialect>(tx: &mut D::Tx, tasks: &[i64], now: Ts) -> Result<()> {
    for chunk in tasks.chunks(BATCH) {
        let dependents: Vec<(i64,)> = D::fetch_all(
            tx,
            Sql::built(format!(
                "SELECT DISTINCT task_id FROM task_dependency
                 WHERE NOT satisfied AND depends_on IN ({})",
                placeholders(1, chunk.len())
            )),
            &id_args(chunk),
        )
        .await?;
        let dependents: Vec<i64> = dependents.into_iter().map(|(id,)| id).collect();
        refresh::<D>(tx, &dependents, now).await?;
    }
    Ok(())
}

/// Runs just created (a start, a retry, an automatic retry): a held one
/// gets its cause, and a task others wait for shows its new status.
pub async fn runs_created<D: Dialect>(tx: &mut D::Tx, runs: &[i64], now: Ts) -> Result<()> {
    for chunk in runs.chunks(BATCH) {
        let made: Vec<(i64, bool, bool)> = D::fetch_all(
            tx,
            Sql::built(format!(
                "SELECT task_id, held, dependents FROM task_run
                 WHERE id IN ({}) AND (held OR dependents)",
                placeholders(1, chunk.len())
            )),
            &id_args(chunk),
        )
        .await?;
        let held: Vec<i64> = made.iter().filter(|r| r.1).map(|r| r.0).collect();
        let awaited: Vec<i64> = made.iter().filter(|r| r.2).map(|r| r.0).collect();
        refresh::<D>(tx, &held, now).await?;
        changed::<D>(tx, &awaited, now).await?;
    }
    Ok(())
}

/// Runs whose status changed (a cancel): tasks waiting for theirs show it.
pub async fn runs_changed<D: Dialect>(tx: &mut D::Tx, runs: &[i64], now: Ts) -> Result<()> {
    for chunk in runs.chunks(BATCH) {
        let awaited: Vec<(i64,)> = D::fetch_all(
            tx,
            Sql::built(format!(
                "SELECT task_id FROM task_run WHERE id IN ({}) AND dependents",
                placeholders(1, chunk.len())
            )),
            &id_args(chunk),
        )
        .await?;
        let awaited: Vec<i64> = awaited.into_iter().map(|(id,)| id).collect();
        changed::<D>(tx, &awaited, now).await?;
    }
    Ok(())
}

/// The distinct tasks waiting on any of `tasks`, locked in id order so two
/// finishes completing dependencies of one task queue rather than deadlock.
async fn dependents_lock<D: Dialect>(tx: &mut D::Tx, tasks: &[i64]) -> Result<Vec<i64>> {
    let rows: Vec<(i64,)> = D::fetch_all(
        tx,
        Sql::built(format!(
            "SELECT t.id FROM task t WHERE t.id IN (SELECT task_id FROM task_dependency
                WHERE NOT satisfied AND depends_on IN ({})) ORDER BY t.id {}",
            placeholders(1, tasks.len()),
            D::row_lock(RowLock::Tasks)
        )),
        &id_args(tasks),
    )
    .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// A held run as its cause needs it: its first open dependency.
#[derive(sqlx::FromRow)]
struct HeldRun {
    id: i64,
    plan_id: i64,
    task_id: i64,
    waiting_cause: Option<String>,
    deps_open: i64,
    dep_name: String,
    dep_status: Option<String>,
    /// The stage the dependency is in, when it is another than the
    /// task's: the task waits for that stage.
    dep_stage: Option<String>,
}

/// Rewrites the waiting cause of each of `tasks` whose latest run is held:
/// "blocked: dependency NAME FAILED — retry or skip it" while a dependency
/// ended badly, else "waits for NAME (STATUS)" and how many more.
async fn refresh<D: Dialect>(tx: &mut D::Tx, tasks: &[i64], now: Ts) -> Result<()> {
    let tasks: BTreeSet<i64> = tasks.iter().copied().collect();
    let tasks: Vec<i64> = tasks.into_iter().collect();
    for chunk in tasks.chunks(BATCH) {
        let held: Vec<HeldRun> = D::fetch_all(
            tx,
            Sql::built(format!(
                "SELECT r.id, r.plan_id, t.id AS task_id, r.waiting_cause, t.deps_open,
                    dt.name AS dep_name, dr.status AS dep_status,
                    CASE WHEN dt.stage <> t.stage THEN dt.stage END AS dep_stage
                 FROM task t
                 JOIN task_run r ON r.id = t.latest_run_id
                 JOIN task dt ON dt.id = (SELECT e.depends_on FROM task_dependency e
                    WHERE e.task_id = t.id AND NOT e.satisfied ORDER BY e.depends_on LIMIT 1)
                 LEFT JOIN task_run dr ON dr.id = dt.latest_run_id
                 WHERE t.id IN ({}) AND r.status = 'PENDING' AND r.held",
                placeholders(1, chunk.len())
            )),
            &id_args(chunk),
        )
        .await?;
        if held.is_empty() {
            continue;
        }
        let failed = failed_dependencies::<D>(tx, &held).await?;
        let causes: Vec<(i64, String)> = held
            .into_iter()
            .filter_map(|run| {
                let cause = match failed.get(&run.task_id) {
                    Some((name, status)) => {
                        format!("blocked: dependency {name} {status} — retry or skip it")
                    }
                    None => waits_for(&run),
                };
                (run.waiting_cause.as_deref() != Some(cause.as_str())).then_some((run.id, cause))
            })
            .collect();
        if !causes.is_empty() {
            let decided = Decisions {
                causes,
                ..Decisions::default()
            };
            D::round_write(tx, &decided, now).await?;
        }
    }
    Ok(())
}

fn waits_for(run: &HeldRun) -> String {
    let status = run.dep_status.as_deref().unwrap_or("NOT_STARTED");
    let stage = match &run.dep_stage {
        Some(stage) => format!("stage {stage}: "),
        None => String::new(),
    };
    match run.deps_open {
        ..=1 => format!("waits for {stage}{} ({status})", run.dep_name),
        n => format!(
            "waits for {stage}{} ({status}) and {} more",
            run.dep_name,
            n - 1
        ),
    }
}

/// For each held task, one dependency whose latest run ended FAILED or
/// CANCELED and that nobody skipped, read from the plans' ended-badly
/// runs (few) rather than from every held task's edges (many).
async fn failed_dependencies<D: Dialect>(
    tx: &mut D::Tx,
    held: &[HeldRun],
) -> Result<HashMap<i64, (String, String)>> {
    let wanted: HashSet<i64> = held.iter().map(|r| r.task_id).collect();
    let plans: BTreeSet<i64> = held.iter().map(|r| r.plan_id).collect();
    let mut failed = HashMap::new();
    for plan in plans {
        let rows: Vec<(i64, String, String)> = D::fetch_all(
            tx,
            "SELECT e.task_id, dt.name, dr.status FROM task_run dr
             JOIN task dt ON dt.id = dr.task_id AND dt.latest_run_id = dr.id
             JOIN task_dependency e ON e.depends_on = dt.id
             WHERE dr.ended_badly_plan = $1
                AND dt.skipped_at IS NULL AND NOT e.satisfied
             ORDER BY dt.id"
                .into(),
            &[plan.into()],
        )
        .await?;
        for (task, name, status) in rows {
            if wanted.contains(&task) {
                failed.entry(task).or_insert((name, status));
            }
        }
    }
    Ok(failed)
}
