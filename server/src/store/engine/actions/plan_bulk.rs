//! Bulk actions on the plans list: Retry, Cancel or Skip the runs of
//! every plan a status and name filter matches, bound to the number of
//! runs the operator was shown. They select their runs with the list's own
//! filter (`plan_list_sql::bulk_sql`) and apply through the runs bulk's one
//! path ([`bulk::apply`]): the count again in the transaction with the
//! tasks locked, the refusal naming both numbers, an event per run and
//! one audit entry.
//!
//! The bound is the runs, not the plans: a plan that gained or lost a
//! failed task since the page was drawn changes what the action would do
//! as surely as a new plan does, and the runs count sees both.

use domain::search::PlanFilter;
use domain::search::{BulkAction, BulkResult, PlanBulkCount};

use crate::store::Result;
use crate::store::engine::actions::bulk::{self, MAX_RUNS, applies};
use crate::store::engine::audit::Asked;
use crate::store::engine::reads::plan_list_sql::{bulk_sql, name_pattern};
use crate::store::engine::{Arg, Dialect, RowLock, Sql, read_one};
use domain::time::Ts;

/// How many runs `action` would change in the plans `filter` matches
/// (counted up to [`MAX_RUNS`] + 1), and in how many plans.
pub async fn plan_bulk_count<D: Dialect>(
    d: &D,
    filter: &PlanFilter,
    action: BulkAction,
) -> Result<PlanBulkCount> {
    let sql = format!(
        "SELECT COUNT(*), COUNT(DISTINCT m.plan_id) FROM ({}) AS m",
        bulk_sql(filter.status, applies(action), "", D::BACKEND)
    );
    let pattern = filter.name.as_deref().map(name_pattern);
    let (runs, plans): (i64, i64) = read_one(
        d,
        Sql::built(sql).unprepared(),
        &[pattern.as_deref().into(), (MAX_RUNS + 1).into()],
    )
    .await?;
    Ok(PlanBulkCount { runs, plans })
}

/// Applies `action` to the runs of the plans `filter` matches, if they are
/// `expected` in number.
pub async fn plan_bulk_apply<D: Dialect>(
    d: &D,
    filter: &PlanFilter,
    action: BulkAction,
    expected: i64,
    asked: &Asked<'_>,
    now: Ts,
) -> Result<BulkResult> {
    let sql = bulk_sql(
        filter.status,
        applies(action),
        D::row_lock(RowLock::Tasks),
        D::BACKEND,
    );
    let pattern = filter.name.as_deref().map(name_pattern);
    // Unprepared, as the list is: a kept statement's generic plan cannot
    // know whether the name pattern is NULL.
    let args: [Arg<'_>; 2] = [pattern.as_deref().into(), (MAX_RUNS + 1).into()];
    bulk::apply(
        d,
        Sql::built(sql).unprepared(),
        &args,
        action,
        expected,
        asked,
        now,
    )
    .await
}
