//! PostgreSQL's submit: a plan, its tasks, their first runs with their
//! creation stamped on them and, for a person's submit, its audit entry, all in
//! one statement.

use sqlx::PgExecutor;

use crate::plan::NewPlan;
use crate::store::engine::audit::Asked;
use crate::store::engine::reads::rows::{self, millis};
use crate::store::signals::{CHANNEL, Signal};
use crate::store::{Actor, Result};
use domain::audit::Outcome;
use domain::time::Ts;

/// The submit statement, with `$audit` (a CTE or nothing) spliced in
/// before its final SELECT.
///
/// The plan, its tasks and (when it starts now) each task's first run,
/// its creation stamped on its row (`created_seq`: by the plan's
/// submitter, "submitted", at its `created_at`). The runs are copied from
/// the task rows as they are inserted, not looked up again. A task is written once,
/// pointing (`latest_run_id`) at the id reserved for its run. When it
/// starts (`$19`) it also queues the NOTIFY (`$21`, `$22`) that wakes the
/// promoter, a round trip less than a separate `pg_notify`.
macro_rules! plan_submit_sql {
    ($audit:literal) => {
        concat!(
            "WITH p AS (
        INSERT INTO plan (name, description, parallel_limit, created_at, created_by, webhooks,
            open_tasks)
        VALUES ($1, $2, $3, $4, $5, $6, cardinality($7::text[])) RETURNING id),
    t AS (
        INSERT INTO task (plan_id, name, target, exclusive, version, run_at, node, timeout_ms,
            max_attempts, heartbeat_interval_ms, heartbeat_timeout_ms, executor,
            reassign_after_ms, latest_run_id)
        SELECT p.id, x.name, x.target, x.exclusive, x.version, x.run_at, x.node, x.timeout_ms,
            x.max_attempts, x.hbi, x.hbt, x.executor, x.reassign,
            CASE WHEN $19 THEN nextval('task_run_id_seq') END
        FROM p, UNNEST($7::text[], $8::text[], $9::bool[], $10::text[], $11::timestamptz[],
            $12::text[], $13::bigint[], $14::bigint[], $15::bigint[], $16::bigint[], $17::text[],
            $18::bigint[])
            WITH ORDINALITY AS x(name, target, exclusive, version, run_at, node, timeout_ms,
                max_attempts, hbi, hbt, executor, reassign, ord)
        ORDER BY x.ord
        RETURNING id, plan_id, run_at, latest_run_id, ",
            $crate::store::engine::plans::run_columns::run_copies_of_task!(""),
            "),
    made AS (
        INSERT INTO task_run (id, task_id, plan_id, attempt, status, run_at, created_at,
            waiting_cause, created_seq, ",
            $crate::store::engine::plans::run_columns::run_copies_of_task!(""),
            ")
        SELECT latest_run_id, id, plan_id, 1, 'PENDING', run_at, $4, $20, ",
            stamp_sql!(),
            ", ",
            $crate::store::engine::plans::run_columns::run_copies_of_task!(""),
            "
        FROM t WHERE $19)",
            $audit,
            "
    SELECT p.id FROM p, LATERAL (SELECT CASE WHEN $19 THEN pg_notify($21, $22) END) announced"
        )
    };
}

/// Who: a plan made inside a larger transaction (a schedule's tick, a
/// submit with dependencies, a keyed submit).
const PLAN_SUBMIT: &str = plan_submit_sql!("");

/// Who: a person's submit that needs nothing else written, as one
/// statement outside any transaction: one round trip where a transaction
/// takes four (BEGIN, the plan, the audit entry, COMMIT), all of them
/// between a submit and its first run's start. The entry's subject is
/// the engine's `plan {id} {name}` (`engine::audit`), made here because
/// the id is.
const PLAN_SUBMIT_AUDITED: &str = plan_submit_sql!(
    ",
    audited AS (
        INSERT INTO audit (at, actor, address, forwarded_for, action, outcome, subject, plan_id,
            detail)
        SELECT $4, $5, $23, $24, $25, $26, 'plan ' || p.id || ' ' || $1, p.id, $27 FROM p)"
);

/// A person's submit, for its audit entry.
pub struct Audit<'a> {
    pub asked: &'a Asked<'a>,
    pub detail: &'a str,
}

/// Writes `plan` (and its runs when it starts now) through `executor`:
/// a transaction, or the pool for a statement of its own. With `audit`,
/// the submit's audit entry too.
pub async fn plan_write<'c>(
    executor: impl PgExecutor<'c>,
    plan: &NewPlan,
    actor: Actor<'_>,
    audit: Option<&Audit<'_>>,
    now: Ts,
) -> Result<i64> {
    let executors = rows::executors_json(plan)?;
    let t = &plan.tasks;
    let sql = match audit {
        Some(_) => PLAN_SUBMIT_AUDITED,
        None => PLAN_SUBMIT,
    };
    let mut query = sqlx::query_scalar(sql)
        .bind(&plan.name)
        .bind(&plan.description)
        .bind(plan.parallel_limit)
        .bind(now)
        .bind(actor)
        .bind(rows::webhooks_json(plan)?)
        .bind(t.iter().map(|t| t.name.clone()).collect::<Vec<_>>())
        .bind(t.iter().map(|t| t.target.clone()).collect::<Vec<_>>())
        .bind(t.iter().map(|t| t.exclusive).collect::<Vec<_>>())
        .bind(t.iter().map(|t| t.version.clone()).collect::<Vec<_>>())
        .bind(t.iter().map(|t| t.run_at.map(Ts::from)).collect::<Vec<_>>())
        .bind(t.iter().map(|t| t.node.clone()).collect::<Vec<_>>())
        .bind(t.iter().map(|t| millis(t.timeout)).collect::<Vec<_>>())
        .bind(t.iter().map(|t| t.max_attempts).collect::<Vec<_>>())
        .bind(
            t.iter()
                .map(|t| t.heartbeat_interval.map(millis))
                .collect::<Vec<_>>(),
        )
        .bind(
            t.iter()
                .map(|t| t.heartbeat_timeout.map(millis))
                .collect::<Vec<_>>(),
        )
        .bind(executors)
        .bind(
            t.iter()
                .map(|t| t.reassign_after.map(millis))
                .collect::<Vec<_>>(),
        )
        .bind(plan.start)
        .bind(domain::gates::CAUSE_NEW)
        .bind(CHANNEL)
        .bind(Signal::Changed.payload());
    if let Some(audit) = audit {
        let by = &audit.asked.by;
        query = query
            .bind(by.address)
            .bind(by.forwarded_for)
            .bind(audit.asked.action)
            .bind(Outcome::Done.as_str())
            .bind(audit.detail);
    }
    Ok(query.fetch_one(executor).await?)
}
