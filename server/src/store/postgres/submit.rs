//! PostgreSQL's submit: a plan, its tasks, their first runs with their
//! creation stamped on them and, for a person's submit, its audit entry, all in
//! one statement.

use sqlx::PgConnection;

use crate::plan::NewPlan;
use crate::store::engine::audit::Asked;
use crate::store::engine::reads::rows::{self, millis};
use crate::store::engine::{Admit, Made};
use crate::store::signals::{CHANNEL, Signal};
use crate::store::{Actor, Result};
use domain::audit::Outcome;
use domain::time::Ts;

/// The submit statement, with `$admitted` (whether a run is admitted:
/// `admitted_sql` or `not_admitted_sql`) and `$audit` (a CTE or nothing)
/// spliced in.
///
/// The plan, its tasks and (when it starts now) each task's first run,
/// its creation stamped on its row (`created_seq`: by the plan's
/// submitter, "submitted", at its `created_at`). The runs are copied from
/// the task rows as they are inserted, not looked up again. A task is written once,
/// pointing (`latest_run_id`) at the id reserved for its run.
///
/// An admitted run (`gates::admission`) is written AVAILABLE with its promotion stamped too, numbered after its
/// creation (a row's values are computed in column order), as a round
/// would have stamped it, by the scheduler at the submit's time, and
/// queued for claimers (`available_run`). `OFFSET 0` keeps the planner
/// from pulling `admitted` up into the five places that read it: pulled
/// up, its probes (a target's settings, its live exclusive runs) ran five
/// times per task (`EXPLAIN ANALYZE`), and a 20,000-run submit took a
/// fifth longer (docs/benchmarks.md). SQLite pulls it up too, into two
/// places; fencing it there (a materialized CTE, sorted again) gained
/// nothing.
///
/// When it starts (`$19`) it also queues the NOTIFYs that wake the
/// promoter for PENDING runs (`$21`, `$22`) and the claimers for admitted
/// ones, a round trip less than a separate `pg_notify`, and returns
/// which kinds it made.
macro_rules! plan_submit_sql {
    ($admitted:expr, $audit:expr) => {
        concat!(
            "WITH p AS (
        INSERT INTO plan (name, description, parallel_limit, created_at, created_by, webhooks,
            open_tasks, starts_on_submit)
        VALUES ($1, $2, $3, $4, $5, $6, cardinality($7::text[]), $19) RETURNING id),
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
            waiting_cause, created_seq, available_at, available_seq, ",
            $crate::store::engine::plans::run_columns::run_copies_of_task!(""),
            ")
        SELECT latest_run_id, id, plan_id, 1,
            CASE WHEN admitted THEN 'AVAILABLE' ELSE 'PENDING' END, run_at, $4,
            CASE WHEN admitted THEN NULL ELSE $20 END, ",
            stamp_sql!(),
            ", CASE WHEN admitted THEN $4 END, CASE WHEN admitted THEN ",
            stamp_sql!(),
            " END, ",
            $crate::store::engine::plans::run_columns::run_copies_of_task!(""),
            "
        FROM (SELECT t.*, ",
            $admitted,
            " AS admitted FROM t OFFSET 0) t
        WHERE $19
        RETURNING id, node, status),
    queued AS (
        INSERT INTO available_run (run_id, node) SELECT id, node FROM made
        WHERE status = 'AVAILABLE'),
    kinds AS (
        SELECT COALESCE(bool_or(status = 'AVAILABLE'), FALSE) AS available,
            COALESCE(bool_or(status = 'PENDING'), FALSE) AS pending
        FROM made)",
            $audit,
            "
    SELECT p.id, kinds.available, kinds.pending FROM p, kinds,
        LATERAL (SELECT CASE WHEN kinds.pending THEN pg_notify($21, $22) END,
            CASE WHEN kinds.available THEN pg_notify($21, $24) END) announced"
        )
    };
}

/// Whether a run is admitted, in the statements that may admit: when the
/// caller allows it (`$23`), the transaction holds the promotion lock and
/// the run passes `admitted_sql`.
macro_rules! admitted_sql {
    () => {
        concat!(
            "$23::boolean AND ",
            holds_lock_sql!("baton.admit_locked"),
            " AND ",
            $crate::store::engine::gates::admission::admitted_sql!(
                "t.",
                "t.target <> ALL($25::text[])"
            )
        )
    };
}

/// What the statements that do not admit write instead: a constant the
/// planner folds, so a submit that admits nothing (a small plan, on a
/// pickup's path) is planned as cheaply as before admission. It names
/// `$23` and `$25`, bound all the same, so they keep their types.
macro_rules! not_admitted_sql {
    () => {
        "($23::boolean AND cardinality($25::text[]) < 0)"
    };
}

/// A person's submit's audit entry, a CTE; its subject is the engine's
/// `plan {id} {name}` (`engine::audit`), made here because the id is.
macro_rules! audited_sql {
    () => {
        ",
    audited AS (
        INSERT INTO audit (at, actor, address, forwarded_for, action, outcome, subject, plan_id,
            detail)
        SELECT $4, $5, $26, $27, $28, $29, 'plan ' || p.id || ' ' || $1, p.id, $30 FROM p)"
    };
}

/// Who: a plan made inside a larger transaction (a schedule's tick, a
/// submit with dependencies, a keyed submit).
const PLAN_SUBMIT: &str = plan_submit_sql!(not_admitted_sql!(), "");

/// [`PLAN_SUBMIT`] where runs may be admitted (a keyed submit that took
/// the promotion lock).
const PLAN_SUBMIT_ADMITTING: &str = plan_submit_sql!(admitted_sql!(), "");

/// Who: a person's submit that needs nothing else written, as one
/// statement outside any transaction: one round trip where a transaction
/// takes four (BEGIN, the plan, the audit entry, COMMIT), all of them
/// between a submit and its first run's start.
const PLAN_SUBMIT_AUDITED: &str = plan_submit_sql!(not_admitted_sql!(), audited_sql!());

/// [`PLAN_SUBMIT_AUDITED`] where runs may be admitted, in the transaction
/// that took the promotion lock for it.
const PLAN_SUBMIT_AUDITED_ADMITTING: &str = plan_submit_sql!(admitted_sql!(), audited_sql!());

/// A person's submit, for its audit entry.
pub struct Audit<'a> {
    pub asked: &'a Asked<'a>,
    pub detail: &'a str,
}

/// Writes `plan` (and its runs when it starts now) in `tx`, admitting
/// runs as `admit` allows if `tx` holds the promotion lock
/// ([`super::ADMIT_LOCK_WAIT`], [`super::ADMIT_LOCK_TRY`]). With `audit`, the submit's
/// audit entry too. The plan's id and what was made.
pub async fn plan_write(
    tx: &mut PgConnection,
    plan: &NewPlan,
    actor: Actor<'_>,
    audit: Option<&Audit<'_>>,
    admit: Admit,
    now: Ts,
) -> Result<(i64, Made)> {
    let executors = rows::executors_json(plan)?;
    let t = &plan.tasks;
    let admitting = admit == Admit::IfClear && plan.admits_runs();
    let sql = match (audit, admitting) {
        (Some(_), true) => PLAN_SUBMIT_AUDITED_ADMITTING,
        (Some(_), false) => PLAN_SUBMIT_AUDITED,
        (None, true) => PLAN_SUBMIT_ADMITTING,
        (None, false) => PLAN_SUBMIT,
    };
    let mut query = sqlx::query_as::<_, (i64, bool, bool)>(sql)
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
        .bind(Signal::Changed.payload())
        .bind(admitting)
        .bind(Signal::Available.payload())
        .bind(plan.exclusive_targets());
    if let Some(audit) = audit {
        let by = &audit.asked.by;
        query = query
            .bind(by.address)
            .bind(by.forwarded_for)
            .bind(audit.asked.action)
            .bind(Outcome::Done.as_str())
            .bind(audit.detail);
    }
    let (plan_id, available, pending) = query.fetch_one(tx).await?;
    Ok((plan_id, Made { available, pending }))
}
