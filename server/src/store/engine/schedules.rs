//! Schedules (docs/design.md, "Schedules"; invariant 9): each due tick
//! makes exactly one plan, whatever the number of replicas and whoever dies
//! around the tick.
//!
//! A round ([`schedule_fire_due`]) locks the due schedule rows, and for
//! each tick first claims `(schedule, tick)` in `schedule_tick` (its
//! primary key), then makes the plan and moves the schedule's cursor, all
//! in one transaction. A round that finds the tick claimed makes nothing;
//! a leader that dies before its commit leaves nothing behind, so the
//! next round makes the tick; one that dies after has made it once. The
//! plan's own unique `(schedule_id, schedule_tick_at)` says the same a
//! second time.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use domain::model::{PlanStatus, ScheduleView, ScheduledPlan, Stuck, TaskStatus, TickView};

use super::audit::{Asked, Subject};
use super::gates::dependencies;
use super::{Admit, Arg, Dialect, RowLock, Sql, actions, optional, read_optional};
use crate::plan::CommandPolicy;
use crate::plan::NewPlan;
use crate::schedule::{self, CatchUp, NewSchedule, Overlap, Timing};
use crate::store::engine::reads::rows;
use crate::store::signals::Signal;
use crate::store::{Actor, Result, StoreError};
use domain::time::Ts;

/// Schedules one round handles; the rest wait for the next round.
const ROUND_SCHEDULES: i64 = 100;

/// What one round did, for the loop's log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Plans made and started, made and queued, ticks skipped because the
    /// previous plan was open, ticks passed over (catch-up), ticks whose
    /// template failed, and queued plans started.
    pub created: usize,
    pub queued: usize,
    pub skipped: usize,
    pub missed: u64,
    pub failed: usize,
    pub started: usize,
}

/// A schedule row as a round reads it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ScheduleRow {
    pub id: i64,
    pub name: String,
    pub cron: String,
    pub time_zone: String,
    pub overlap: String,
    pub catch_up: String,
    pub catch_up_limit: i64,
    pub params: String,
    pub template: String,
    pub next_tick_at: Option<Ts>,
    pub paused_by: Option<String>,
    pub paused_at: Option<Ts>,
    pub created_at: Ts,
    pub created_by: String,
    pub updated_at: Ts,
    pub updated_by: String,
}

pub const SCHEDULE_COLUMNS: &str = "id, name, cron, time_zone, overlap, catch_up, catch_up_limit,
    params, template, next_tick_at, paused_by, paused_at, created_at, created_by, updated_at,
    updated_by";

impl ScheduleRow {
    pub fn timing(&self) -> std::result::Result<Timing, String> {
        Timing::parse(&self.cron, &self.time_zone).map_err(|e| e.message)
    }

    fn params(&self) -> BTreeMap<String, String> {
        serde_json::from_str(&self.params).unwrap_or_default()
    }

    fn overlap(&self) -> Overlap {
        Overlap::parse(&self.overlap).unwrap_or(Overlap::Skip)
    }

    fn catch_up(&self) -> CatchUp {
        CatchUp::from_parts(&self.catch_up, self.catch_up_limit).unwrap_or(CatchUp::Latest)
    }

    /// The plan tick `at` makes.
    fn plan_at(&self, timing: &Timing, at: Ts) -> std::result::Result<NewPlan, String> {
        let template: serde_json::Value =
            serde_json::from_str(&self.template).map_err(|e| e.to_string())?;
        schedule::render(&self.name, &template, &self.params(), timing, at).map_err(|e| {
            match e.field {
                Some(field) => format!("{field}: {}", e.message),
                None => e.message,
            }
        })
    }
}

fn conflict_on_name(result: Result<u64>, name: &str) -> Result<u64> {
    match result {
        Err(StoreError::Database(sqlx::Error::Database(db))) if db.is_unique_violation() => Err(
            StoreError::Conflict(format!("a schedule named {name} already exists")),
        ),
        other => other,
    }
}

/// The columns create and update write, as `$1…$11`: name, cron, zone,
/// overlap, catch-up and its limit, params, template, next tick, and when
/// and by whom (`$10`, `$11`).
fn definition_args<'a>(
    s: &'a NewSchedule,
    params: &'a str,
    template: &'a str,
    next: Option<Ts>,
    actor: Actor<'a>,
    now: Ts,
) -> Vec<Arg<'a>> {
    vec![
        s.name.as_str().into(),
        s.cron.as_str().into(),
        s.time_zone.as_str().into(),
        s.overlap.as_str().into(),
        s.catch_up.as_str().into(),
        s.catch_up.limit().into(),
        params.into(),
        template.into(),
        next.into(),
        now.into(),
        actor.into(),
    ]
}

/// Stores a new schedule; its first tick is the first after `now`.
pub async fn schedule_create<D: Dialect>(
    d: &D,
    s: &NewSchedule,
    asked: &Asked<'_>,
    now: Ts,
) -> Result<i64> {
    let actor = asked.by.name;
    let mut tx = d.begin().await?;
    let params =
        serde_json::to_string(&s.params).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let template = template_to_store(s, None)?;
    let next = s.timing.next_after(now);
    conflict_on_name(
        D::execute(
            &mut tx,
            "INSERT INTO schedule (name, cron, time_zone, overlap, catch_up, catch_up_limit,
                params, template, next_tick_at, created_at, created_by, updated_at, updated_by)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $10, $11)"
                .into(),
            &definition_args(s, &params, &template, next, actor, now),
        )
        .await,
        &s.name,
    )?;
    let (id,): (i64,) = super::one::<D, _>(
        &mut tx,
        "SELECT id FROM schedule WHERE name = $1",
        &[s.name.as_str().into()],
    )
    .await?;
    asked
        .about(Subject::Schedule(id))
        .done::<D>(&mut tx, &format!("{} {}", s.cron, s.time_zone), now)
        .await?;
    D::commit(tx).await?;
    Ok(id)
}

/// Locks schedule `id` for the rest of the transaction.
async fn locked<D: Dialect>(tx: &mut D::Tx, id: i64) -> Result<ScheduleRow> {
    let sql = format!(
        "SELECT {SCHEDULE_COLUMNS} FROM schedule WHERE id = $1 {}",
        D::row_lock(RowLock::Schedules)
    );
    optional::<D, ScheduleRow>(tx, Sql::built(sql), &[id.into()])
        .await?
        .ok_or(StoreError::NotFound {
            what: "schedule",
            id,
        })
}

/// Replaces schedule `id`'s definition. A new expression or zone starts
/// from the first tick after `now`; otherwise the cursor stays.
pub async fn schedule_update<D: Dialect>(
    d: &D,
    id: i64,
    s: &NewSchedule,
    asked: &Asked<'_>,
    now: Ts,
) -> Result<()> {
    let actor = asked.by.name;
    let mut tx = d.begin().await?;
    let old = locked::<D>(&mut tx, id).await?;
    let next = if old.cron == s.cron && old.time_zone == s.time_zone {
        old.next_tick_at
    } else {
        s.timing.next_after(now)
    };
    let params =
        serde_json::to_string(&s.params).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let template = template_to_store(s, Some(&old))?;
    conflict_on_name(
        D::execute(
            &mut tx,
            "UPDATE schedule SET name = $1, cron = $2, time_zone = $3, overlap = $4,
                catch_up = $5, catch_up_limit = $6, params = $7, template = $8,
                next_tick_at = $9, updated_at = $10, updated_by = $11
             WHERE id = $12"
                .into(),
            &[
                definition_args(s, &params, &template, next, actor, now),
                vec![id.into()],
            ]
            .concat(),
        )
        .await,
        &s.name,
    )?;
    let detail = format!("{} {}", s.cron, s.time_zone);
    asked.done::<D>(&mut tx, &detail, now).await?;
    D::commit(tx).await
}

/// Deletes schedule `id` and its tick records; the plans it made stay.
pub async fn schedule_delete<D: Dialect>(d: &D, id: i64, asked: &Asked<'_>, now: Ts) -> Result<()> {
    let mut tx = d.begin().await?;
    locked::<D>(&mut tx, id).await?;
    // Before the row goes: the entry reads the schedule's name.
    asked.done::<D>(&mut tx, "", now).await?;
    D::execute(
        &mut tx,
        "DELETE FROM schedule_tick WHERE schedule_id = $1".into(),
        &[id.into()],
    )
    .await?;
    D::execute(
        &mut tx,
        "DELETE FROM schedule WHERE id = $1".into(),
        &[id.into()],
    )
    .await?;
    D::commit(tx).await
}

/// Pauses schedule `id`: its ticks make nothing until it is resumed.
pub async fn schedule_pause<D: Dialect>(d: &D, id: i64, asked: &Asked<'_>, now: Ts) -> Result<()> {
    let actor = asked.by.name;
    let mut tx = d.begin().await?;
    let s = locked::<D>(&mut tx, id).await?;
    if let Some(by) = s.paused_by {
        return Err(StoreError::Conflict(format!(
            "schedule {} is already paused by {by}",
            s.name
        )));
    }
    D::execute(
        &mut tx,
        "UPDATE schedule SET paused_by = $2, paused_at = $3 WHERE id = $1".into(),
        &[id.into(), actor.into(), now.into()],
    )
    .await?;
    asked.done::<D>(&mut tx, "", now).await?;
    D::commit(tx).await
}

/// Resumes schedule `id` from its first tick after `now`: ticks that fell
/// while it was paused were the operator's choice, not missed ones.
pub async fn schedule_resume<D: Dialect>(d: &D, id: i64, asked: &Asked<'_>, now: Ts) -> Result<()> {
    let mut tx = d.begin().await?;
    let s = locked::<D>(&mut tx, id).await?;
    if s.paused_by.is_none() {
        return Err(StoreError::Conflict(format!(
            "schedule {} is not paused",
            s.name
        )));
    }
    let next = s.timing().ok().and_then(|t| t.next_after(now));
    D::execute(
        &mut tx,
        "UPDATE schedule SET paused_by = NULL, paused_at = NULL, next_tick_at = $2 WHERE id = $1"
            .into(),
        &[id.into(), next.into()],
    )
    .await?;
    asked.done::<D>(&mut tx, "", now).await?;
    D::commit(tx).await
}

/// A schedule's plan, if this server would run it: a schedule made before
/// `BATON_DISABLE_COMMANDS` (or an allow-list) came in made a plan bound
/// to fail every tick, and Trigger answered 201 where a submit of the same
/// plan is refused (hostile trial). The tick is `failed`, naming why.
fn runnable(
    commands: &CommandPolicy,
    plan: std::result::Result<NewPlan, String>,
) -> std::result::Result<NewPlan, String> {
    let plan = plan?;
    commands
        .check(&plan)
        .map_err(|e| format!("the plan it makes would not run here: {}", e.message))?;
    Ok(plan)
}

/// Makes and starts a plan from schedule `id` now, whatever its overlap
/// policy (the operator asked for it); the plan has no tick.
pub async fn schedule_trigger<D: Dialect>(
    d: &D,
    id: i64,
    asked: &Asked<'_>,
    now: Ts,
) -> Result<i64> {
    let mut tx = d.begin().await?;
    let s = locked::<D>(&mut tx, id).await?;
    let timing = s.timing().map_err(StoreError::Invalid)?;
    let commands = d.shared().commands();
    let plan = runnable(&commands, s.plan_at(&timing, now)).map_err(StoreError::Invalid)?;
    let plan_id = make_plan::<D>(&mut tx, &s, &plan, None, false, asked.by.name, now).await?;
    let detail = format!("made plan {plan_id} {}", plan.name);
    asked.done::<D>(&mut tx, &detail, now).await?;
    D::commit(tx).await?;
    if plan.start {
        d.signals().raise(Signal::Changed);
    }
    Ok(plan_id)
}

/// Writes `plan` as schedule `s`'s plan for `tick` (none for a trigger);
/// `queued` leaves it NOT_STARTED behind the schedule's previous plan.
async fn make_plan<D: Dialect>(
    tx: &mut D::Tx,
    s: &ScheduleRow,
    plan: &NewPlan,
    tick: Option<Ts>,
    queued: bool,
    actor: Actor<'_>,
    now: Ts,
) -> Result<i64> {
    let mut plan = plan.clone();
    let starts = plan.start;
    if queued {
        plan.start = false;
    }
    // Left to the round: a tick's plan is written inside the schedule's
    // own transaction, which does not take the promotion lock.
    let (plan_id, _) = D::plan_write(tx, &plan, actor, Admit::Never, now).await?;
    dependencies::plan_written::<D>(tx, plan_id, &plan, now).await?;
    // Booleans are written as literals: both backends read TRUE/FALSE. A
    // queued plan starts in its turn, as its template asked: it is held
    // by the queue, not by its file.
    let sql = if queued && starts {
        "UPDATE plan SET schedule_id = $2, schedule_tick_at = $3, queued = TRUE,
            starts_on_submit = TRUE WHERE id = $1"
    } else if queued {
        "UPDATE plan SET schedule_id = $2, schedule_tick_at = $3, queued = TRUE WHERE id = $1"
    } else {
        "UPDATE plan SET schedule_id = $2, schedule_tick_at = $3 WHERE id = $1"
    };
    D::execute(tx, sql.into(), &[plan_id.into(), s.id.into(), tick.into()]).await?;
    Ok(plan_id)
}

/// The schedule's latest plan, if it is still open: a task not yet
/// started (a queued plan's, or one waiting for an operator's Run) or a
/// run PENDING, AVAILABLE or RUNNING. A plan whose tasks ended FAILED
/// with nothing waiting is closed: the schedule carries on and its page
/// shows the failures.
async fn open_plan<D: Dialect>(tx: &mut D::Tx, schedule_id: i64) -> Result<Option<i64>> {
    let latest: Option<(i64,)> = optional::<D, _>(
        tx,
        "SELECT id FROM plan WHERE schedule_id = $1 ORDER BY id DESC LIMIT 1",
        &[schedule_id.into()],
    )
    .await?;
    let Some((plan_id,)) = latest else {
        return Ok(None);
    };
    Ok(plan_is_open::<D>(tx, plan_id).await?.then_some(plan_id))
}

async fn plan_is_open<D: Dialect>(tx: &mut D::Tx, plan_id: i64) -> Result<bool> {
    let open: Option<(i64,)> = optional::<D, _>(
        tx,
        "SELECT t.id FROM task t LEFT JOIN task_run r ON r.id = t.latest_run_id
         WHERE t.plan_id = $1 AND t.skipped_at IS NULL
           AND (r.id IS NULL OR r.status IN ('PENDING', 'AVAILABLE', 'RUNNING'))
         LIMIT 1",
        &[plan_id.into()],
    )
    .await?;
    Ok(open.is_some())
}

/// One round: every due schedule's ticks up to `now`, then the queued
/// plans whose turn has come. `grace`: how late a tick may be and still
/// count as on time rather than missed.
pub async fn schedule_fire_due<D: Dialect>(
    d: &D,
    replica: &str,
    grace: Duration,
    now: Ts,
) -> Result<TickReport> {
    // A plain read first: the round runs every poll interval, and its
    // transaction would take SQLite's one writer (and a PostgreSQL
    // transaction) even on a server with nothing due.
    let work: Option<(i64,)> = read_optional(
        d,
        "SELECT id FROM schedule WHERE paused_by IS NULL AND next_tick_at <= $1
         UNION ALL SELECT id FROM plan WHERE queued LIMIT 1",
        &[now.into()],
    )
    .await?;
    if work.is_none() {
        return Ok(TickReport::default());
    }
    let mut tx = d.begin().await?;
    let sql = format!(
        "SELECT {SCHEDULE_COLUMNS} FROM schedule
         WHERE paused_by IS NULL AND next_tick_at <= $1
         ORDER BY next_tick_at, id LIMIT {ROUND_SCHEDULES} {}",
        D::row_lock(RowLock::DueSchedules)
    );
    let due: Vec<ScheduleRow> = D::fetch_all(&mut tx, Sql::built(sql), &[now.into()]).await?;
    let mut report = TickReport::default();
    let commands = d.shared().commands();
    for s in &due {
        fire::<D>(&mut tx, s, &commands, replica, grace, now, &mut report).await?;
    }
    report.started = start_queued::<D>(&mut tx, now).await?;
    let changed = report.created > 0 || report.started > 0;
    if changed {
        D::announce(&mut tx, Signal::Changed).await?;
    }
    if report.created + report.queued > 0 && crate::faults::exit_before_tick_commit() {
        crate::faults::die_now("a schedule tick's plan is written but not committed");
    }
    D::commit(tx).await?;
    if changed {
        d.signals().raise(Signal::Changed);
    }
    Ok(report)
}

async fn fire<D: Dialect>(
    tx: &mut D::Tx,
    s: &ScheduleRow,
    commands: &CommandPolicy,
    replica: &str,
    grace: Duration,
    now: Ts,
    report: &mut TickReport,
) -> Result<()> {
    let Some(cursor) = s.next_tick_at else {
        return Ok(());
    };
    let timing = match s.timing() {
        Ok(timing) => timing,
        Err(why) => {
            // Stored by an older version that accepted it; stop it rather
            // than fail every round.
            record::<D>(tx, s.id, cursor, "failed", None, &why, replica, now).await?;
            report.failed += 1;
            return move_cursor::<D>(tx, s.id, None).await;
        }
    };
    let due = timing.due(cursor, now, grace, s.catch_up());
    if let (Some(from), Some(to)) = (due.missed_from, due.missed_to) {
        let detail = format!(
            "{}{} tick(s) from {} to {} passed over (catch_up: {}): no replica led in time",
            if due.missed_at_least { "at least " } else { "" },
            due.missed,
            from,
            to,
            s.catch_up
        );
        record::<D>(tx, s.id, from, "missed", None, &detail, replica, now).await?;
        report.missed += due.missed;
    }
    for tick in due.fire {
        // The claim: a tick another round handled makes nothing here.
        let claimed = D::execute(
            tx,
            "INSERT INTO schedule_tick (schedule_id, tick_at, outcome, recorded_at, recorded_by)
             VALUES ($1, $2, 'created', $3, $4) ON CONFLICT (schedule_id, tick_at) DO NOTHING"
                .into(),
            &[s.id.into(), tick.into(), now.into(), replica.into()],
        )
        .await?
            == 1;
        if !claimed {
            continue;
        }
        let plan = match runnable(commands, s.plan_at(&timing, tick)) {
            Ok(plan) => plan,
            Err(why) => {
                outcome::<D>(tx, s.id, tick, "failed", None, &why).await?;
                report.failed += 1;
                continue;
            }
        };
        let open = match s.overlap() {
            Overlap::Allow => None,
            Overlap::Skip | Overlap::Queue => open_plan::<D>(tx, s.id).await?,
        };
        match (s.overlap(), open) {
            (Overlap::Skip, Some(previous)) => {
                let why =
                    format!("plan #{previous} of this schedule is still open (overlap: skip)");
                outcome::<D>(tx, s.id, tick, "skipped", None, &why).await?;
                report.skipped += 1;
            }
            (Overlap::Queue, Some(previous)) => {
                let id = make_plan::<D>(tx, s, &plan, Some(tick), true, &s.updated_by, now).await?;
                let why = format!("waits for plan #{previous} of this schedule (overlap: queue)");
                outcome::<D>(tx, s.id, tick, "queued", Some(id), &why).await?;
                report.queued += 1;
            }
            _ => {
                let id =
                    make_plan::<D>(tx, s, &plan, Some(tick), false, &s.updated_by, now).await?;
                outcome::<D>(tx, s.id, tick, "created", Some(id), "").await?;
                report.created += 1;
            }
        }
    }
    move_cursor::<D>(tx, s.id, due.next).await
}

async fn move_cursor<D: Dialect>(tx: &mut D::Tx, id: i64, next: Option<Ts>) -> Result<()> {
    D::execute(
        tx,
        "UPDATE schedule SET next_tick_at = $2 WHERE id = $1".into(),
        &[id.into(), next.into()],
    )
    .await?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn record<D: Dialect>(
    tx: &mut D::Tx,
    schedule_id: i64,
    tick: Ts,
    outcome: &str,
    plan_id: Option<i64>,
    detail: &str,
    replica: &str,
    now: Ts,
) -> Result<()> {
    D::execute(
        tx,
        "INSERT INTO schedule_tick (schedule_id, tick_at, outcome, plan_id, detail, recorded_at,
            recorded_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (schedule_id, tick_at) DO NOTHING"
            .into(),
        &[
            schedule_id.into(),
            tick.into(),
            outcome.into(),
            plan_id.into(),
            detail.into(),
            now.into(),
            replica.into(),
        ],
    )
    .await?;
    Ok(())
}

async fn outcome<D: Dialect>(
    tx: &mut D::Tx,
    schedule_id: i64,
    tick: Ts,
    outcome: &str,
    plan_id: Option<i64>,
    detail: &str,
) -> Result<()> {
    D::execute(
        tx,
        "UPDATE schedule_tick SET outcome = $3, plan_id = $4, detail = $5
         WHERE schedule_id = $1 AND tick_at = $2"
            .into(),
        &[
            schedule_id.into(),
            tick.into(),
            outcome.into(),
            plan_id.into(),
            Some(detail).filter(|d| !d.is_empty()).into(),
        ],
    )
    .await?;
    Ok(())
}

/// Starts each schedule's oldest queued plan once the plan before it has
/// closed; returns how many started.
async fn start_queued<D: Dialect>(tx: &mut D::Tx, now: Ts) -> Result<usize> {
    let queued: Vec<(i64, i64)> = D::fetch_all(
        tx,
        "SELECT schedule_id, MIN(id) FROM plan WHERE queued GROUP BY schedule_id".into(),
        &[],
    )
    .await?;
    let mut started = 0;
    for (schedule_id, plan_id) in queued {
        let before: Option<(i64,)> = optional::<D, _>(
            tx,
            "SELECT id FROM plan WHERE schedule_id = $1 AND id < $2 ORDER BY id DESC LIMIT 1",
            &[schedule_id.into(), plan_id.into()],
        )
        .await?;
        if let Some((before,)) = before
            && plan_is_open::<D>(tx, before).await?
        {
            continue;
        }
        actions::plan_start_in::<D>(tx, plan_id, crate::store::SCHEDULER, now).await?;
        started += 1;
    }
    Ok(started)
}

/// Plans and ticks a schedule's page shows.
const RECENT: i64 = 10;

#[derive(sqlx::FromRow)]
struct RecentPlan {
    schedule_id: i64,
    id: i64,
    name: String,
    schedule_tick_at: Option<Ts>,
    created_at: Ts,
    queued: bool,
}

#[derive(sqlx::FromRow)]
struct TickRow {
    schedule_id: i64,
    tick_at: Ts,
    outcome: String,
    plan_id: Option<i64>,
    detail: Option<String>,
    recorded_at: Ts,
    recorded_by: String,
}

/// Schedule `id` as its page shows it.
pub async fn schedule_get<D: Dialect>(d: &D, id: i64) -> Result<ScheduleView> {
    let sql = format!("SELECT {SCHEDULE_COLUMNS} FROM schedule WHERE id = $1");
    let row: ScheduleRow = read_optional(d, Sql::built(sql), &[id.into()])
        .await?
        .ok_or(StoreError::NotFound {
            what: "schedule",
            id,
        })?;
    let mut views = views::<D>(d, vec![row]).await?;
    Ok(views.pop().expect("one row, one view"))
}

/// Every schedule, by name.
pub async fn schedule_list<D: Dialect>(d: &D) -> Result<Vec<ScheduleView>> {
    let sql = format!("SELECT {SCHEDULE_COLUMNS} FROM schedule ORDER BY name");
    let rows: Vec<ScheduleRow> = d.read(Sql::built(sql), &[]).await?;
    views::<D>(d, rows).await
}

/// Schedules per statement of [`recent`]: each is one bounded index scan.
const RECENT_CHUNK: usize = 100;

/// The newest [`RECENT`] rows of `from` for each schedule in `ids`, newest
/// first: one statement per [`RECENT_CHUNK`] schedules, each schedule's
/// part a scan of its own index (`plan_schedule`, `schedule_tick`'s key)
/// that stops after [`RECENT`] rows. (A window over every row of every
/// schedule would read a long-lived schedule's whole history, and
/// SQLite has no LATERAL join.)
async fn recent<D: Dialect, R: super::StoreRow>(
    d: &D,
    ids: &[i64],
    columns: &str,
    from: &str,
    newest: &str,
) -> Result<Vec<R>> {
    let mut out = Vec::new();
    for chunk in ids.chunks(RECENT_CHUNK) {
        let sql = (1..=chunk.len())
            .map(|i| {
                format!(
                    "SELECT * FROM (SELECT {columns} FROM {from} WHERE schedule_id = ${i}
                     ORDER BY {newest} DESC LIMIT {RECENT}) AS s{i}"
                )
            })
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        out.extend(d.read::<R>(Sql::built(sql), &super::id_args(chunk)).await?);
    }
    Ok(out)
}

/// The pages' views of `rows`: their recent plans, those plans' statuses
/// and their recent ticks read for all of them at once, not per schedule.
async fn views<D: Dialect>(d: &D, rows: Vec<ScheduleRow>) -> Result<Vec<ScheduleView>> {
    let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
    let plans: Vec<RecentPlan> = recent(
        d,
        &ids,
        "schedule_id, id, name, schedule_tick_at, created_at, queued",
        "plan",
        "id",
    )
    .await?;
    let statuses = plan_statuses::<D>(d, &plans.iter().map(|p| p.id).collect::<Vec<_>>()).await?;
    let ticks: Vec<TickRow> = recent(
        d,
        &ids,
        "schedule_id, tick_at, outcome, plan_id, detail, recorded_at, recorded_by",
        "schedule_tick",
        "tick_at",
    )
    .await?;
    let mut plans_of: HashMap<i64, Vec<RecentPlan>> = HashMap::new();
    for p in plans {
        plans_of.entry(p.schedule_id).or_default().push(p);
    }
    let mut ticks_of: HashMap<i64, Vec<TickRow>> = HashMap::new();
    for t in ticks {
        ticks_of.entry(t.schedule_id).or_default().push(t);
    }
    Ok(rows
        .into_iter()
        .map(|row| {
            let plans = plans_of.remove(&row.id).unwrap_or_default();
            let ticks = ticks_of.remove(&row.id).unwrap_or_default();
            view(row, plans, ticks, &statuses)
        })
        .collect())
}

fn view(
    row: ScheduleRow,
    plans: Vec<RecentPlan>,
    ticks: Vec<TickRow>,
    statuses: &HashMap<i64, PlanStatus>,
) -> ScheduleView {
    let timing = row.timing();
    let next_ticks = match (&timing, row.paused_by.is_some(), row.next_tick_at) {
        (Ok(t), false, Some(next)) => {
            let mut ticks = vec![next];
            ticks.extend(t.upcoming(next, 4));
            ticks.into_iter().map(|t| t.0).collect()
        }
        _ => Vec::new(),
    };
    let catch_up = row.catch_up();
    ScheduleView {
        id: row.id,
        description: match &timing {
            Ok(t) => t.describe(),
            Err(why) => why.clone(),
        },
        overlap: row.overlap().as_str().to_owned(),
        catch_up: catch_up.as_str().to_owned(),
        catch_up_limit: matches!(catch_up, CatchUp::All { .. }).then(|| catch_up.limit()),
        params: row.params(),
        next_ticks,
        plans: plans
            .into_iter()
            .map(|p| ScheduledPlan {
                status: statuses.get(&p.id).copied().unwrap_or(PlanStatus::Done),
                id: p.id,
                name: p.name,
                tick_at: p.schedule_tick_at.map(|t| t.0),
                created_at: p.created_at.0,
                queued: p.queued,
            })
            .collect(),
        ticks: ticks
            .into_iter()
            .map(|t| TickView {
                tick_at: t.tick_at.0,
                outcome: t.outcome,
                plan_id: t.plan_id,
                detail: t.detail,
                recorded_at: t.recorded_at.0,
                recorded_by: t.recorded_by,
            })
            .collect(),
        name: row.name,
        cron: row.cron,
        time_zone: row.time_zone,
        template: shown_template(&row.template),
        paused_by: row.paused_by,
        paused_at: row.paused_at.map(|t| t.0),
        created_at: row.created_at.0,
        created_by: row.created_by,
        updated_at: row.updated_at.0,
        updated_by: row.updated_by,
    }
}

/// The status of each plan in `ids`, from its tasks' statuses.
async fn plan_statuses<D: Dialect>(d: &D, ids: &[i64]) -> Result<HashMap<i64, PlanStatus>> {
    let mut counted: Vec<(i64, String, i64, i64, i64)> = Vec::new();
    for chunk in ids.chunks(super::BATCH) {
        let sql = format!(
            "SELECT plan_id, status, COUNT(*), SUM(blocked), SUM(waiting) FROM (
                SELECT t.plan_id, {status} AS status, {stuck}
                FROM task t LEFT JOIN task_run r ON r.id = t.latest_run_id
                WHERE t.plan_id IN ({ids})) tasks
             GROUP BY 1, 2",
            status = rows::task_status_sql!(),
            stuck = rows::stuck_columns_sql!(),
            ids = super::placeholders(1, chunk.len())
        );
        counted.extend(
            d.read::<(i64, String, i64, i64, i64)>(Sql::built(sql), &super::id_args(chunk))
                .await?,
        );
    }
    let mut counts: HashMap<i64, (BTreeMap<TaskStatus, i64>, Stuck)> = HashMap::new();
    for (plan, status, n, blocked, waiting) in counted {
        if let Some(status) = TaskStatus::parse(&status) {
            let (tally, stuck) = counts.entry(plan).or_default();
            tally.insert(status, n);
            stuck.blocked += blocked;
            stuck.waiting += waiting;
        }
    }
    Ok(counts
        .into_iter()
        .map(|(plan, (counts, stuck))| (plan, PlanStatus::from_counts(&counts, stuck)))
        .collect())
}

/// The template as every reader sees it: its secrets hidden
/// ([`crate::schedule::hidden`]).
fn shown_template(stored: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(stored) {
        Ok(template) => crate::schedule::hidden::hide(&template).to_string(),
        Err(_) => stored.to_owned(),
    }
}

/// `new`'s template, with each value it gives as hidden taken from
/// `stored` (the schedule before the update, whose parameters say where
/// its secrets went; `None` when creating one).
fn template_to_store(new: &NewSchedule, stored: Option<&ScheduleRow>) -> Result<String> {
    let template = stored
        .and_then(|s| serde_json::from_str(&s.template).ok())
        .unwrap_or(serde_json::Value::Null);
    let params = stored
        .and_then(|s| serde_json::from_str(&s.params).ok())
        .unwrap_or_default();
    let mut new_template = new.template.clone();
    crate::schedule::hidden::keep_hidden(&mut new_template, &new.params, &template, &params)
        .map_err(StoreError::Invalid)?;
    Ok(new_template.to_string())
}
