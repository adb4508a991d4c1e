//! The gates' reads for a promotion round (docs/design.md, "Gates"): the
//! statements that load what [`domain::gates::evaluate`] judges. Each is
//! one statement, so one snapshot; their comments say which index serves
//! them. The round itself is `promote.rs`; the writes of the gates an
//! operator or a finish moves are `dependencies.rs`, `approvals.rs`,
//! `brakes.rs` (pause, capacity) and `pins.rs`; a submit's own round for
//! its plain runs is `admission.rs`.

pub mod admission;
pub mod approvals;
pub mod brakes;
pub mod dependencies;
pub mod pins;
pub mod promote;

use domain::gates::NodeLabels;
use domain::time::Ts;

use crate::store::{Result, Store};

/// Which node labels live replicas and agents carry, from their
/// heartbeats. A drained worker's count as gone: it takes no new run, so
/// a run pinned to its label waits for another and is reassigned as if
/// it had died.
pub async fn node_labels(
    store: &dyn Store,
    stale_after: std::time::Duration,
    now: Ts,
) -> Result<NodeLabels> {
    let replicas = store.replica_list().await?;
    let (drained, working): (Vec<_>, Vec<_>) = replicas.iter().partition(|r| r.draining.is_some());
    Ok(NodeLabels::from_heartbeats(
        working
            .iter()
            .map(|r| (r.info.labels.as_slice(), r.last_heartbeat)),
        stale_after,
        now,
    )
    .with_drained(drained.iter().filter_map(|r| {
        let (since, _) = r.draining.as_ref()?;
        Some((r.info.labels.as_slice(), *since))
    })))
}

/// The AVAILABLE runs pinned to a node, nearly always none: a read of the
/// whole queue of AVAILABLE runs, which has no index of them (one more
/// would not fit a claim's relation locks in PostgreSQL's fast path,
/// `store::postgres::plan_tests`), then of each pinned run by key.
pub const AVAILABLE_PINNED: &str = "SELECT r.id, r.node, r.reassign_after_ms, r.created_at
    FROM available_run q JOIN task_run r ON r.id = q.run_id WHERE q.node IS NOT NULL";

/// The nodes AVAILABLE runs are pinned to, read off the queue the same way.
pub const AVAILABLE_NODES: &str = "SELECT DISTINCT node FROM available_run WHERE node IS NOT NULL";

/// Takes run `$1` off the queue of AVAILABLE runs (docs/design.md, "Run
/// storage"), for a statement that moved it out of AVAILABLE.
pub const DEQUEUE: &str = "DELETE FROM available_run WHERE run_id = $1";

/// The columns of a [`PendingRun`], from run `r` and its plan `p`.
macro_rules! pending_columns {
    () => {
        "r.id, r.task_id, r.plan_id, r.target, r.exclusive, r.version, r.node, r.run_at,
        r.waiting_cause, p.parallel_limit, r.created_at, r.reassign_after_ms, r.dependents,
        r.held, r.approval_pending, r.attempt
    FROM task_run r JOIN plan p ON p.id = r.plan_id"
    };
}
pub(crate) use pending_columns;

/// Promoter round: every PENDING run that no dependency holds, with its
/// plan's limit; and the held ones that carry a version, for the version
/// gate alone. Each half is one index scan (`task_run_pending` from
/// `pending_held = 0`, `task_run_held_versions`: the status as
/// the generated column `pending_held` carries it, docs/design.md "Run
/// storage"); the caller sorts by id.
///
/// One statement, so one snapshot: read apart (the held versions with
/// the holders), a finish that released a held v1 between the two reads
/// left it in neither, and v2 on its target started first (PostgreSQL,
/// READ COMMITTED; the eight-replica history check caught it).
///
/// `$round_locked` is the backend's condition that this round holds the
/// promotion lock (`Dialect::PENDING_RUNS`): a round without it reads no
/// runs, and so does nothing.
macro_rules! pending_runs_sql {
    ($round_locked:expr) => {
        concat!(
            "SELECT ",
            $crate::store::engine::gates::pending_columns!(),
            " WHERE r.pending_held = 0 AND ",
            $round_locked,
            "
    UNION ALL SELECT ",
            $crate::store::engine::gates::pending_columns!(),
            " WHERE r.pending_held = 1 AND r.version IS NOT NULL AND ",
            $round_locked
        )
    };
}
pub(crate) use pending_runs_sql;

/// The AVAILABLE and RUNNING runs (`id, target, exclusive, plan_id,
/// version`): the queue of AVAILABLE runs (`available_run`) and the
/// RUNNING runs (`running_run`: the claim log on PostgreSQL, a partial
/// index on SQLite; docs/design.md, "Run storage"). Written as a union because neither
/// database uses the per-status partial indexes for `status IN
/// ('AVAILABLE', 'RUNNING')`: both scanned all of `task_run`, history
/// included, in every promotion round (25.7 ms a round on PostgreSQL with
/// 200,000 finished runs, 0.14 ms as a union).
macro_rules! active_runs {
    () => {
        "SELECT r.id, r.target, r.exclusive, r.plan_id, r.version
        FROM available_run q JOIN task_run r ON r.id = q.run_id
        UNION ALL
        SELECT id, target, exclusive, plan_id, version FROM running_run"
    };
}
pub(crate) use active_runs;

/// Promoter round: the paused plans (a partial index holds them), every
/// target's settings (a handful of rows) and the runs holding each target,
/// grouped, as [`ContextRow`]s: one statement, where three took three
/// round trips in every round. The first branch types the columns that
/// only the last one fills: PostgreSQL resolves a union's types branch by
/// branch, and two untyped NULLs make text.
macro_rules! round_context_sql {
    () => {
        concat!(
            "SELECT 'plan' AS kind, id AS plan_id, NULL AS target, NULL AS capacity, paused_by,
        paused_at, CAST(NULL AS BOOLEAN) AS exclusive, CAST(NULL AS BIGINT) AS holder,
        CAST(NULL AS BIGINT) AS last, CAST(NULL AS BIGINT) AS n
    FROM plan WHERE paused_by IS NOT NULL
    UNION ALL
    SELECT 'target', NULL, target, capacity, paused_by, paused_at, NULL, NULL, NULL, NULL
    FROM target_setting
    UNION ALL
    SELECT 'hold', NULL, target, NULL, NULL, NULL, exclusive, MIN(id), MAX(id), COUNT(*) FROM (",
            $crate::store::engine::gates::active_runs!(),
            ") a GROUP BY target, exclusive"
        )
    };
}
pub(crate) use round_context_sql;

/// [`round_context_sql`]'s statement.
pub const ROUND_CONTEXT: &str = round_context_sql!();

/// Versioned runs that are their task's latest, ended FAILED or CANCELED,
/// and whose task nobody skipped (gate 2's halt), each with `$columns`
/// besides its target, version and status.
///
/// Read through the partial index `task_run_ended_badly` (on
/// `ended_badly_plan`, which the database sets to the plan's id while the
/// run is FAILED or CANCELED, docs/design.md "Run storage"), every run
/// in it looked up in `task` by key, one at a time: a subquery per run,
/// which neither database turns into a join. Unversioned runs and old
/// attempts that a retry replaced stay in the index but fail the filter
/// or the lookup. Written as a join, PostgreSQL hashed or merged the
/// index's runs against all of `task`: with 1,000,000 runs, 10,000 of
/// them failed, that read every task, 260 ms, and 700 ms in a round (whose
/// settings rule out the sequential scan but not a walk of the whole
/// key), where the lookups take 160 ms (docs/benchmarks.md); `plan_tests`
/// pins the lookups down.
macro_rules! halts_sql {
    ($columns:literal) => {
        concat!(
            "SELECT r.target, r.version, r.status",
            $columns,
            "
    FROM task_run r
    WHERE r.ended_badly_plan IS NOT NULL AND r.version IS NOT NULL AND ",
            $crate::store::engine::gates::latest_unskipped_sql!()
        )
    };
}
pub(crate) use halts_sql;

/// Run `r` is its task's latest and the task is not skipped, as one
/// lookup of the task by key ([`halts_sql`] says why not a join).
macro_rules! latest_unskipped_sql {
    () => {
        "r.id = (SELECT t.latest_run_id FROM task t
            WHERE t.id = r.task_id AND t.skipped_at IS NULL)"
    };
}
pub(crate) use latest_unskipped_sql;

/// Promoter round: the halted lines ([`halts_sql`]).
pub const HALTS: &str = halts_sql!("");

/// Promoter round: slots taken in each plan.
pub const PLAN_HOLDS: &str = concat!(
    "SELECT plan_id, COUNT(*) AS n FROM (",
    active_runs!(),
    ") a GROUP BY plan_id"
);

/// Promoter round: versions of the runs holding targets.
pub const VERSION_HOLDS: &str = concat!(
    "SELECT id, target, version FROM (",
    active_runs!(),
    ") a WHERE version IS NOT NULL"
);
