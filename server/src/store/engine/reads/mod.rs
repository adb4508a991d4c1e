//! The reads the API and the dashboard make: plans, runs, logs, events,
//! replicas, deliveries and the overview. None takes a lock or writes.

pub mod history_sql;
pub mod overview;
pub mod plan_list_sql;
pub mod rows;
pub mod run_search_sql;
pub mod stored_plan;

use domain::model::{DeliveryView, EventView, PlanList, PlanStatus, PlanView, RunView};
use domain::search::RunList;

use crate::store::engine::notifications;
use crate::store::engine::{BATCH, Dialect, Sql, id_args, read_one, read_optional};
use crate::store::{ReplicaRecord, Result, StoreError};
use domain::filter::run::RunFilter;
use domain::time::Ts;
use overview::OverviewStats;
use stored_plan::{StoredPlan, StoredPlanRow, StoredTask};

pub async fn plan_get<D: Dialect>(d: &D, id: i64) -> Result<PlanView> {
    let plan: rows::PlanRow = read_optional(d, rows::PLAN_GET, &[id.into()])
        .await?
        .ok_or(StoreError::NotFound { what: "plan", id })?;
    let tasks: Vec<rows::TaskRow> = d.read(rows::PLAN_TASKS.into(), &[id.into()]).await?;
    // A plan has dependency edges only if one of its tasks has
    // dependents, which its submit settles for good. Most plans have
    // none, and the edge read joins every task of the plan to the edge
    // table: for 1,000 tasks and no edges, 1.2 ms with 4,500 edges
    // elsewhere, 1,240 buffers on a never-analysed bench database.
    let has_edges = tasks.iter().any(|t| t.has_dependents);
    let claim: Option<rows::NotificationRow> =
        read_optional(d, notifications::CLAIM_GET, &[id.into()]).await?;
    let mut view = rows::plan_view(plan, tasks, claim)?;
    if has_edges {
        let edges: Vec<(i64, i64)> = d.read(rows::PLAN_DEPENDENCIES.into(), &[id.into()]).await?;
        rows::with_dependencies(&mut view, &edges);
    }
    Ok(view)
}

/// Plans newest first: those in `status` whose name contains `name` (any
/// case), and how many match in all.
pub async fn plan_list<D: Dialect>(
    d: &D,
    status: Option<PlanStatus>,
    name: Option<&str>,
    limit: i64,
    offset: i64,
) -> Result<PlanList> {
    let pattern = name.map(plan_list_sql::name_pattern);
    // A filtered list is not kept as a prepared statement: PostgreSQL
    // plans a kept statement for the actual values five times, then
    // switches to one generic plan, which cannot know whether `$1` is NULL
    // (`$1 IS NULL OR name LIKE $1`). With a status filter that plan walked
    // every plan and probed its runs: the FAILED page of 20,000 plans took
    // 730 ms instead of 70. The unfiltered list keeps its statement: its
    // generic plan is the right one, and planning each time cost it about
    // 1.5 ms.
    let keep = |sql: Sql| {
        if status.is_none() && name.is_none() {
            sql
        } else {
            sql.unprepared()
        }
    };
    let page: Vec<plan_list_sql::PlanListRow> = d
        .read(
            keep(Sql::built(plan_list_sql::page_sql(status, D::BACKEND))),
            &[pattern.as_deref().into(), limit.into(), offset.into()],
        )
        .await?;
    let (total,): (i64,) = read_one(
        d,
        keep(Sql::built(plan_list_sql::count_sql(status, D::BACKEND))),
        &[pattern.as_deref().into()],
    )
    .await?;
    plan_list_sql::page(page, total)
}

/// Runs matching `filter` with ids below `before` (all when `None`),
/// newest first, at most `limit`: the probe, then the rest when the probe
/// leaves the page short ([`run_search`]).
pub async fn run_search<D: Dialect>(
    d: &D,
    filter: &RunFilter,
    before: Option<i64>,
    limit: i64,
) -> Result<RunList> {
    let mut upper = match before {
        Some(before) => before,
        None => {
            let (max,): (Option<i64>,) = read_one(d, "SELECT MAX(id) FROM task_run", &[]).await?;
            max.unwrap_or(0).saturating_add(1)
        }
    };
    // A run that finished before `until` was created before it: start
    // below the runs created later, instead of reading through them.
    if let Some(until) = filter.until {
        let created_later =
            first_run_created_since(d, Ts::from(until).plus(run_search_sql::CLOCK_MARGIN), upper)
                .await?;
        upper = upper.min(created_later);
    }
    let lower = upper.saturating_sub(run_search_sql::PROBE_IDS).max(0);
    let search = run_search_sql::Search::new(D::BACKEND, filter);
    // One row past the page says whether there is a next one.
    let wanted = limit.saturating_add(1);
    let mut rows: Vec<run_search_sql::RunSummaryRow> = d
        .read(
            Sql::built(search.probe_sql()).unprepared(),
            &search.args(upper, lower, wanted),
        )
        .await?;
    if (rows.len() as i64) < wanted && lower > 0 {
        let short = wanted - rows.len() as i64;
        let args = search.args(lower, 0, short);
        let mut rest: Vec<run_search_sql::RunSummaryRow> = Vec::new();
        for sql in [search.rest_finished_sql(), search.rest_live_sql()]
            .into_iter()
            .flatten()
        {
            rest.extend(
                d.read::<run_search_sql::RunSummaryRow>(Sql::built(sql).unprepared(), &args)
                    .await?,
            );
        }
        // Each part newest first: merged, the newest `short` of the two.
        rest.sort_unstable_by_key(|r| std::cmp::Reverse(r.id));
        rest.truncate(short as usize);
        rows.extend(rest);
    }
    run_search_sql::page(rows, limit as usize)
}

/// An id from which on every run below `upper` was created at or after
/// `at`, found by bisecting the ids: run ids are handed out in creation
/// order, so `created_at` rises with them (within the replicas' clock
/// skew, which [`run_search_sql::CLOCK_MARGIN`] absorbs). About 20 primary-key
/// lookups for a million runs.
async fn first_run_created_since<D: Dialect>(d: &D, at: Ts, upper: i64) -> Result<i64> {
    // Every run with an id >= `hi` was created at or after `at`; the run
    // `lo` (when not 0) was created before it.
    let (mut lo, mut hi) = (0_i64, upper);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let next: Option<(i64, Ts)> = read_optional(
            d,
            "SELECT id, created_at FROM task_run WHERE id >= $1 ORDER BY id LIMIT 1",
            &[mid.into()],
        )
        .await?;
        match next {
            Some((id, created)) if id < hi => {
                if created >= at {
                    hi = id;
                } else {
                    lo = id;
                }
            }
            // No run in [mid, hi): the bound holds from mid on.
            _ => hi = mid,
        }
    }
    Ok(hi)
}

pub async fn run_get<D: Dialect>(d: &D, id: i64) -> Result<RunView> {
    let run: rows::RunRow = read_optional(d, rows::RUN_GET, &[id.into()])
        .await?
        .ok_or(StoreError::NotFound { what: "run", id })?;
    let events: Vec<rows::EventRow> = d.read(history_sql::RUN_EVENTS.into(), &[id.into()]).await?;
    rows::run_view(run, events)
}

/// A plan as submitted (`stored_plan`).
pub async fn plan_stored<D: Dialect>(d: &D, id: i64) -> Result<StoredPlan> {
    let plan: StoredPlanRow = read_optional(d, stored_plan::PLAN, &[id.into()])
        .await?
        .ok_or(StoreError::NotFound { what: "plan", id })?;
    let tasks: Vec<StoredTask> = d.read(stored_plan::TASKS.into(), &[id.into()]).await?;
    let edges: Vec<(i64, i64)> = d.read(rows::PLAN_DEPENDENCIES.into(), &[id.into()]).await?;
    Ok(StoredPlan { plan, tasks, edges })
}

/// Tasks as submitted, those of `ids` that exist, in id order.
pub async fn tasks_stored<D: Dialect>(d: &D, ids: &[i64]) -> Result<Vec<StoredTask>> {
    let mut found = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(BATCH) {
        let sql = stored_plan::tasks_by_id(chunk.len());
        found.extend(
            d.read::<StoredTask>(Sql::built(sql), &id_args(chunk))
                .await?,
        );
    }
    Ok(found)
}

pub async fn run_log<D: Dialect>(d: &D, id: i64) -> Result<String> {
    let (exists,): (i64,) = read_one(d, rows::RUN_EXISTS, &[id.into()]).await?;
    if exists == 0 {
        return Err(StoreError::NotFound { what: "run", id });
    }
    let lines: Vec<rows::LogRow> = d.read(rows::RUN_LOG.into(), &[id.into()]).await?;
    Ok(rows::log_text(lines))
}

/// The last `limit` lines of a run's log and how many it has in all.
pub async fn run_log_tail<D: Dialect>(
    d: &D,
    id: i64,
    limit: i64,
) -> Result<domain::views::LogTail> {
    let lines: Vec<overview::LogTailRow> = d
        .read(overview::LOG_TAIL.into(), &[id.into(), limit.into()])
        .await?;
    let total = if (lines.len() as i64) < limit {
        lines.len() as i64
    } else {
        let (n,): (i64,) = read_one(d, overview::LOG_COUNT, &[id.into()]).await?;
        n
    };
    Ok(overview::log_tail(lines, total))
}

/// Live run counts, runs finished per minute over the last hour, and the
/// latest failures (the dashboard's overview).
pub async fn overview_stats<D: Dialect>(d: &D, now: Ts) -> Result<OverviewStats> {
    let live: overview::LiveRow = read_one(d, overview::LIVE_COUNTS, &[]).await?;
    let minutes: Vec<overview::MinuteRow> = d
        .read(
            D::FINISHED_PER_MINUTE.into(),
            &[overview::window_start(now).into()],
        )
        .await?;
    let failed: Vec<overview::FailedRow> = d
        .read(
            overview::RECENT_FAILED.into(),
            &[overview::RECENT_FAILURES.into()],
        )
        .await?;
    overview::overview_stats(now, live, minutes, failed)
}

/// Events with id > `after_id`, oldest first.
pub async fn event_list<D: Dialect>(d: &D, after_id: i64, limit: i64) -> Result<Vec<EventView>> {
    let events: Vec<rows::EventRow> = d
        .read(
            history_sql::EVENTS_AFTER.into(),
            &[after_id.into(), limit.into()],
        )
        .await?;
    events.into_iter().map(rows::event_view).collect()
}

pub async fn replica_list<D: Dialect>(d: &D) -> Result<Vec<ReplicaRecord>> {
    let found: Vec<rows::ReplicaRow> = d.read(rows::REPLICA_LIST.into(), &[]).await?;
    found.into_iter().map(rows::replica_record).collect()
}

/// Deliveries with their attempts, newest first; one plan's or all.
pub async fn delivery_list<D: Dialect>(
    d: &D,
    plan_id: Option<i64>,
    limit: i64,
) -> Result<Vec<DeliveryView>> {
    let found: Vec<notifications::DeliveryRow> = d
        .read(
            notifications::DELIVERY_LIST.into(),
            &[plan_id.into(), limit.into()],
        )
        .await?;
    let Some(oldest) = found.iter().map(|d| d.id).min() else {
        return Ok(Vec::new());
    };
    let attempts: Vec<notifications::AttemptRow> = d
        .read(
            notifications::DELIVERY_ATTEMPTS.into(),
            &[plan_id.into(), oldest.into()],
        )
        .await?;
    Ok(notifications::delivery_views(found, attempts))
}
