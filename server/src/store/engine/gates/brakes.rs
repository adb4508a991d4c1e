//! Gates 8 and 9 (docs/design.md, "Gates"): an operator pauses a plan or a
//! target (the brake during an incident) and sets a target's capacity.
//!
//! Each change takes the promotion lock first, so it falls between two
//! promotion rounds: a round that started before a pause has committed
//! when the pause commits, and every later round sees it. No run of a
//! paused plan or target is promoted after its pause returns. Runs
//! already AVAILABLE or RUNNING carry on.

use std::time::Duration;

use domain::model::{PausedPlan, PausedView, TargetView};

use crate::store::engine::audit::Asked;
use crate::store::engine::{Dialect, optional};
use crate::store::signals::Signal;
use crate::store::{Actor, Result, StoreError};
use domain::time::Ts;

/// How long a brake waits for a promotion round to end: rounds take
/// milliseconds; a replica stuck inside one is cut off by
/// `idle_in_transaction_session_timeout` well before this on PostgreSQL.
const ROUND_WAIT: Duration = Duration::from_secs(30);

/// Begins a transaction that holds the promotion lock.
async fn between_rounds<D: Dialect>(d: &D) -> Result<D::Tx> {
    let mut tx = d.begin().await?;
    D::promoter_lock_wait(&mut tx, ROUND_WAIT).await?;
    Ok(tx)
}

fn when(at: Option<Ts>) -> String {
    at.map(|at| format!(" at {}", at.0.format("%Y-%m-%d %H:%M:%SZ")))
        .unwrap_or_default()
}

/// Pauses plan `id`: no run of it is promoted until it is resumed.
pub async fn plan_pause<D: Dialect>(d: &D, id: i64, asked: &Asked<'_>, now: Ts) -> Result<()> {
    let mut tx = between_rounds(d).await?;
    let outcome = plan_pause_in::<D>(&mut tx, id, asked.by.name, now).await;
    let outcome = recorded::<D>(&mut tx, asked, outcome, "", now).await;
    end::<D>(d, tx, outcome).await
}

/// `outcome`, with the change recorded in `tx` when it was made.
async fn recorded<D: Dialect>(
    tx: &mut D::Tx,
    asked: &Asked<'_>,
    outcome: Result<()>,
    detail: &str,
    now: Ts,
) -> Result<()> {
    outcome?;
    asked.done::<D>(tx, detail, now).await
}

/// Commits `tx` when `outcome` is a success or a refusal, then raises
/// `Changed` if it was a success. A refusal wrote nothing, and dropping
/// its transaction instead would leave the promotion lock held until the
/// connection's next use. A failed write is not committed: the change
/// and its audit entry go together or not at all.
async fn end<D: Dialect>(d: &D, tx: D::Tx, outcome: Result<()>) -> Result<()> {
    if let Err(StoreError::Database(_)) = outcome {
        return outcome;
    }
    D::commit(tx).await?;
    outcome?;
    d.signals().raise(Signal::Changed);
    Ok(())
}

async fn plan_pause_in<D: Dialect>(
    tx: &mut D::Tx,
    id: i64,
    actor: Actor<'_>,
    now: Ts,
) -> Result<()> {
    let state: Option<(Option<String>, Option<Ts>)> = optional::<D, _>(
        tx,
        "SELECT paused_by, paused_at FROM plan WHERE id = $1",
        &[id.into()],
    )
    .await?;
    match state {
        None => return Err(StoreError::NotFound { what: "plan", id }),
        Some((Some(by), at)) => {
            return Err(StoreError::Conflict(format!(
                "plan {id} is already paused by {by}{}",
                when(at)
            )));
        }
        Some((None, _)) => {}
    }
    D::execute(
        tx,
        "UPDATE plan SET paused_by = $2, paused_at = $3 WHERE id = $1".into(),
        &[id.into(), actor.into(), now.into()],
    )
    .await?;
    D::announce(tx, Signal::Changed).await
}

/// Resumes plan `id`.
pub async fn plan_resume<D: Dialect>(d: &D, id: i64, asked: &Asked<'_>, now: Ts) -> Result<()> {
    let mut tx = d.begin().await?;
    let state: Option<(Option<String>,)> = optional::<D, _>(
        &mut tx,
        "SELECT paused_by FROM plan WHERE id = $1",
        &[id.into()],
    )
    .await?;
    match state {
        None => return Err(StoreError::NotFound { what: "plan", id }),
        Some((None,)) => {
            return Err(StoreError::Conflict(format!("plan {id} is not paused")));
        }
        Some((Some(_),)) => {}
    }
    D::execute(
        &mut tx,
        "UPDATE plan SET paused_by = NULL, paused_at = NULL WHERE id = $1".into(),
        &[id.into()],
    )
    .await?;
    D::announce(&mut tx, Signal::Changed).await?;
    asked.done::<D>(&mut tx, "", now).await?;
    D::commit(tx).await?;
    d.signals().raise(Signal::Changed);
    Ok(())
}

/// A target's settings row.
#[derive(sqlx::FromRow)]
struct Setting {
    capacity: Option<i64>,
    paused_by: Option<String>,
    paused_at: Option<Ts>,
}

async fn setting_get<D: Dialect>(tx: &mut D::Tx, target: &str) -> Result<Option<Setting>> {
    optional::<D, Setting>(
        tx,
        "SELECT capacity, paused_by, paused_at FROM target_setting WHERE target = $1",
        &[target.into()],
    )
    .await
}

/// Writes a target's settings; a row with nothing set is removed.
async fn setting_put<D: Dialect>(
    tx: &mut D::Tx,
    target: &str,
    s: &Setting,
    actor: Actor<'_>,
    now: Ts,
) -> Result<()> {
    if s.capacity.is_none() && s.paused_by.is_none() {
        D::execute(
            tx,
            "DELETE FROM target_setting WHERE target = $1".into(),
            &[target.into()],
        )
        .await?;
        return Ok(());
    }
    D::execute(
        tx,
        "INSERT INTO target_setting (target, capacity, paused_by, paused_at, updated_by, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (target) DO UPDATE SET capacity = excluded.capacity,
            paused_by = excluded.paused_by, paused_at = excluded.paused_at,
            updated_by = excluded.updated_by, updated_at = excluded.updated_at"
            .into(),
        &[
            target.into(),
            s.capacity.into(),
            s.paused_by.as_deref().into(),
            s.paused_at.into(),
            actor.into(),
            now.into(),
        ],
    )
    .await?;
    Ok(())
}

/// A target an operator pauses or caps, held to the rule a plan's targets
/// keep: one that no task could name (`db/or\u{200B}ders`) would look
/// like a brake on `db/orders` and hold nothing.
fn target_text(target: &str) -> Result<String> {
    crate::plan::name_text(target.to_owned(), "target").map_err(|e| StoreError::Invalid(e.message))
}

/// Pauses `target` across every plan.
pub async fn target_pause<D: Dialect>(
    d: &D,
    target: &str,
    asked: &Asked<'_>,
    now: Ts,
) -> Result<()> {
    let target = &target_text(target)?;
    let mut tx = between_rounds(d).await?;
    let outcome = target_pause_in::<D>(&mut tx, target, asked.by.name, now).await;
    let outcome = recorded::<D>(&mut tx, asked, outcome, "", now).await;
    end::<D>(d, tx, outcome).await
}

async fn target_pause_in<D: Dialect>(
    tx: &mut D::Tx,
    target: &str,
    actor: Actor<'_>,
    now: Ts,
) -> Result<()> {
    let current = setting_get::<D>(tx, target).await?;
    if let Some(Setting {
        paused_by: Some(by),
        paused_at,
        ..
    }) = &current
    {
        return Err(StoreError::Conflict(format!(
            "target {target} is already paused by {by}{}",
            when(*paused_at)
        )));
    }
    let next = Setting {
        capacity: current.and_then(|c| c.capacity),
        paused_by: Some(actor.to_owned()),
        paused_at: Some(now),
    };
    setting_put::<D>(tx, target, &next, actor, now).await?;
    D::announce(tx, Signal::Changed).await
}

/// Resumes `target`.
pub async fn target_resume<D: Dialect>(
    d: &D,
    target: &str,
    asked: &Asked<'_>,
    now: Ts,
) -> Result<()> {
    let actor = asked.by.name;
    let target = &target_text(target)?;
    let mut tx = d.begin().await?;
    let Some(current) = setting_get::<D>(&mut tx, target)
        .await?
        .filter(|s| s.paused_by.is_some())
    else {
        return Err(StoreError::Conflict(format!(
            "target {target} is not paused"
        )));
    };
    let next = Setting {
        paused_by: None,
        paused_at: None,
        ..current
    };
    setting_put::<D>(&mut tx, target, &next, actor, now).await?;
    D::announce(&mut tx, Signal::Changed).await?;
    asked.done::<D>(&mut tx, "", now).await?;
    D::commit(tx).await?;
    d.signals().raise(Signal::Changed);
    Ok(())
}

/// Sets (or, with `None`, removes) the capacity of `target`. Lowering it
/// below what holds the target now stops nothing: no more runs start
/// until the holders drop below it.
pub async fn target_capacity_set<D: Dialect>(
    d: &D,
    target: &str,
    capacity: Option<i64>,
    asked: &Asked<'_>,
    now: Ts,
) -> Result<()> {
    let target = &target_text(target)?;
    if let Some(c) = capacity
        && !(1..=crate::plan::limits::MAX_PARALLEL_LIMIT).contains(&c)
    {
        return Err(StoreError::Invalid(format!(
            "capacity must be between 1 and {} (got {c}); null removes it",
            crate::plan::limits::MAX_PARALLEL_LIMIT
        )));
    }
    let mut tx = between_rounds(d).await?;
    let outcome = capacity_in::<D>(&mut tx, target, capacity, asked.by.name, now).await;
    let detail = match capacity {
        Some(c) => format!("capacity {c}"),
        None => "capacity removed".to_owned(),
    };
    let outcome = recorded::<D>(&mut tx, asked, outcome, &detail, now).await;
    end::<D>(d, tx, outcome).await
}

async fn capacity_in<D: Dialect>(
    tx: &mut D::Tx,
    target: &str,
    capacity: Option<i64>,
    actor: Actor<'_>,
    now: Ts,
) -> Result<()> {
    let current = setting_get::<D>(tx, target).await?;
    let next = match current {
        Some(s) => Setting { capacity, ..s },
        None => Setting {
            capacity,
            paused_by: None,
            paused_at: None,
        },
    };
    setting_put::<D>(tx, target, &next, actor, now).await?;
    D::announce(tx, Signal::Changed).await
}

/// A `target_setting` row.
#[derive(sqlx::FromRow)]
struct TargetSetting {
    target: String,
    #[sqlx(flatten)]
    setting: Setting,
}

/// A target's live runs, grouped.
#[derive(sqlx::FromRow)]
struct TargetLoad {
    target: String,
    holding: i64,
    first_holder: Option<i64>,
    exclusive_holders: i64,
    waiting: i64,
}

/// Live runs by target, through the per-status partial indexes (a union:
/// see `gates::active_runs`).
const TARGET_LOADS: &str = concat!(
    "SELECT target,
        SUM(holds) AS holding,
        MIN(CASE WHEN holds = 1 THEN id END) AS first_holder,
        SUM(CASE WHEN holds = 1 AND exclusive THEN 1 ELSE 0 END) AS exclusive_holders,
        SUM(1 - holds) AS waiting
    FROM (SELECT id, target, exclusive, 1 AS holds FROM (",
    crate::store::engine::gates::active_runs!(),
    ") a UNION ALL SELECT id, target, exclusive, 0 AS holds FROM task_run
        WHERE pending_held IS NOT NULL) l
    GROUP BY target"
);

/// The versioned runs that halt their target's line: the gates' own
/// read (`gates::HALTS`), with the run's id.
const TARGET_HALTS: &str = crate::store::engine::gates::halts_sql!(", r.id");

/// Every target with live runs, settings or a halted line, by name.
pub async fn target_list<D: Dialect>(d: &D) -> Result<Vec<TargetView>> {
    let loads: Vec<TargetLoad> = d.read(TARGET_LOADS.into(), &[]).await?;
    let halts: Vec<(String, String, String, i64)> = d.read(TARGET_HALTS.into(), &[]).await?;
    let settings: Vec<TargetSetting> = d
        .read(
            "SELECT target, capacity, paused_by, paused_at FROM target_setting".into(),
            &[],
        )
        .await?;
    let mut views: std::collections::BTreeMap<String, TargetView> = loads
        .into_iter()
        .map(|l| {
            let view = TargetView {
                target: l.target.clone(),
                capacity: None,
                paused_by: None,
                paused_at: None,
                holding: l.holding,
                first_holder: l.first_holder,
                held_exclusively: l.exclusive_holders > 0,
                waiting: l.waiting,
                halted_by: None,
            };
            (l.target, view)
        })
        .collect();
    for TargetSetting { target, setting } in settings {
        let view = views
            .entry(target.clone())
            .or_insert_with(|| TargetView::idle(target));
        view.capacity = setting.capacity;
        view.paused_by = setting.paused_by;
        view.paused_at = setting.paused_at.map(|t| t.0);
    }
    // The smallest halted version is where the line stopped, as gate 2
    // names it in each waiting run's cause.
    for (target, version, status, run_id) in halts {
        let view = views
            .entry(target.clone())
            .or_insert_with(|| TargetView::idle(target));
        let smaller = view.halted_by.as_ref().is_none_or(|h| {
            domain::version::compare(&version, &h.version) == std::cmp::Ordering::Less
        });
        if smaller {
            view.halted_by = Some(domain::model::HaltedLine {
                version,
                run_id,
                status: domain::model::RunStatus::parse(&status)
                    .unwrap_or(domain::model::RunStatus::Failed),
            });
        }
    }
    Ok(views.into_values().collect())
}

/// Every paused plan and target.
pub async fn paused_list<D: Dialect>(d: &D) -> Result<PausedView> {
    let targets = target_list(d)
        .await?
        .into_iter()
        .filter(|t| t.paused_by.is_some())
        .collect();
    Ok(PausedView {
        plans: paused_plans(d).await?,
        targets,
    })
}

/// Every paused plan, the oldest pause first.
pub async fn paused_plans<D: Dialect>(d: &D) -> Result<Vec<PausedPlan>> {
    let plans: Vec<(i64, String, String, Ts)> = d
        .read(
            "SELECT id, name, paused_by, paused_at FROM plan
             WHERE paused_by IS NOT NULL ORDER BY paused_at, id"
                .into(),
            &[],
        )
        .await?;
    Ok(plans
        .into_iter()
        .map(|(id, name, paused_by, paused_at)| PausedPlan {
            id,
            name,
            paused_by,
            paused_at: paused_at.0,
        })
        .collect())
}
