//! SQLite's submit: a plan's task rows as multi-row `INSERT … VALUES`.
//!
//! A JSON array unpacked with `json_each` costs a parse of each task's
//! object per extracted field (thirteen of them), which made the task
//! insert the dearest statement of a submit. Bound values cost nothing to
//! unpack. Rows go in chunks whose sizes are powers of two, so a handful
//! of statement shapes (each prepared once and cached) serve every plan
//! size, and no statement comes near SQLite's limit on bound parameters.

use sqlx::sqlite::Sqlite;
use sqlx::{QueryBuilder, Transaction};

use crate::plan::NewPlan;
use crate::store::Result;
use crate::store::engine::reads::rows::{self, millis};
use domain::time::Ts;

/// The largest chunk: 64 rows × 15 columns = 960 parameters.
const CHUNK: usize = 64;

/// Inserts `plan`'s tasks with the ids `first_task`, `first_task + 1`, …
/// in file order, each pointing (`latest_run_id`) at `first_run + i` when
/// `first_run` is given (the plan starts now) and at nothing otherwise.
pub async fn tasks_insert(
    tx: &mut Transaction<'_, Sqlite>,
    plan_id: i64,
    plan: &NewPlan,
    first_task: i64,
    first_run: Option<i64>,
) -> Result<()> {
    let executors = rows::executors_json(plan)?;
    let mut start = 0;
    while start < plan.tasks.len() {
        let left = plan.tasks.len() - start;
        let size = CHUNK.min(1 << left.ilog2());
        let chunk = plan.tasks[start..start + size]
            .iter()
            .zip(&executors[start..start + size]);
        let mut insert = QueryBuilder::<Sqlite>::new(
            "INSERT INTO task (id, plan_id, name, target, exclusive, version, run_at, node,
                timeout_ms, max_attempts, heartbeat_interval_ms, heartbeat_timeout_ms, executor,
                reassign_after_ms, latest_run_id) ",
        );
        insert.push_values(chunk.enumerate(), |mut row, (i, (task, executor))| {
            let n = (start + i) as i64;
            row.push_bind(first_task + n)
                .push_bind(plan_id)
                .push_bind(task.name.as_str())
                .push_bind(task.target.as_str())
                .push_bind(task.exclusive)
                .push_bind(task.version.as_deref())
                .push_bind(task.run_at.map(Ts::from))
                .push_bind(task.node.as_deref())
                .push_bind(millis(task.timeout))
                .push_bind(task.max_attempts)
                .push_bind(task.heartbeat_interval.map(millis))
                .push_bind(task.heartbeat_timeout.map(millis))
                .push_bind(executor.as_str())
                .push_bind(task.reassign_after.map(millis))
                .push_bind(first_run.map(|run| run + n));
        });
        insert.build().execute(&mut **tx).await?;
        start += size;
    }
    Ok(())
}
