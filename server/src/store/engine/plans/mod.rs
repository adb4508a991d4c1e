//! Plan submission: a plan, its tasks and (when it starts now) their first
//! runs in one transaction (on PostgreSQL one statement, when nothing is
//! written after the tasks); once per idempotency key when one is given.
//! And the way back: a plan read for its file ([`plan_export`]), audited.

pub mod new_runs;
pub mod run_columns;

use crate::plan::NewPlan;
use crate::store::Result;
use crate::store::engine::audit::{Asked, Subject};
use crate::store::engine::gates::dependencies;
use crate::store::engine::reads::{self, stored_plan::StoredPlan};
use crate::store::engine::{Admit, Dialect, optional};
use crate::store::signals::{Signal, Signals};
use crate::store::submission::{self, IdempotencyKey, Submitted};
use domain::audit::Person;
use domain::time::Ts;

/// What a submit made of its plan's first runs, for the wake-ups it owes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Made {
    /// Some were admitted AVAILABLE (`gates::admission`): claimers claim.
    pub available: bool,
    /// Some are PENDING: the promoter judges them.
    pub pending: bool,
}

impl Made {
    /// Wakes this replica's loops that the new runs concern (on
    /// PostgreSQL the submit's NOTIFY wakes the other replicas').
    fn announce(self, signals: &Signals) {
        if self.pending {
            signals.raise(Signal::Changed);
        }
        if self.available {
            signals.raise(Signal::Available);
        }
    }
}

/// Stores a validated plan; when `plan.start`, creates its first runs,
/// PENDING or, where admission allows, AVAILABLE.
///
/// The submit is the first step between an operator's request and its
/// runs' start, so where the backend can do it as a single statement
/// ([`Dialect::plan_submit_alone`]) it does.
pub async fn plan_insert<D: Dialect>(
    d: &D,
    plan: &NewPlan,
    asked: &Asked<'_>,
    now: Ts,
) -> Result<i64> {
    let alone = match plan.writes_after_tasks() {
        true => None,
        false => d.plan_submit_alone(plan, asked, &detail(plan), now).await?,
    };
    let (plan_id, made) = match alone {
        Some(written) => written,
        None => {
            let mut tx = d.begin().await?;
            let (plan_id, made) =
                D::plan_write(&mut tx, plan, asked.by.name, Admit::IfClear, now).await?;
            dependencies::plan_written::<D>(&mut tx, plan_id, plan, now).await?;
            submitted::<D>(&mut tx, asked, plan_id, plan, now).await?;
            D::commit(tx).await?;
            (plan_id, made)
        }
    };
    made.announce(d.signals());
    Ok(plan_id)
}

/// [`plan_insert`] once per key: a key seen within
/// [`submission::IDEMPOTENCY_WINDOW`] with the same document answers the
/// plan it made, with another document [`Submitted::KeyReused`].
pub async fn plan_insert_keyed<D: Dialect>(
    d: &D,
    plan: &NewPlan,
    asked: &Asked<'_>,
    now: Ts,
    key: &IdempotencyKey<'_>,
) -> Result<Submitted> {
    let mut tx = d.begin().await?;
    let expired = now.minus(submission::IDEMPOTENCY_WINDOW);
    D::execute(
        &mut tx,
        "DELETE FROM plan_submission WHERE created_at < $1".into(),
        &[expired.into()],
    )
    .await?;
    // Claim the key first: a submit racing with the same key waits here
    // (on PostgreSQL for the row, on SQLite for the write lock) until this
    // transaction ends, then finds the key taken.
    let claimed = D::execute(
        &mut tx,
        "INSERT INTO plan_submission (idempotency_key, body_sha256, created_at)
         VALUES ($1, $2, $3) ON CONFLICT (idempotency_key) DO NOTHING"
            .into(),
        &[key.key.into(), key.body_sha256.as_str().into(), now.into()],
    )
    .await?
        == 1;
    if !claimed {
        let existing: Option<(String, Option<i64>)> = optional::<D, _>(
            &mut tx,
            "SELECT body_sha256, plan_id FROM plan_submission WHERE idempotency_key = $1",
            &[key.key.into()],
        )
        .await?;
        if let Some(answer) = submission::decide(existing, &key.body_sha256) {
            return Ok(answer);
        }
    }
    let (plan_id, made) = D::plan_write(&mut tx, plan, asked.by.name, Admit::IfClear, now).await?;
    dependencies::plan_written::<D>(&mut tx, plan_id, plan, now).await?;
    submitted::<D>(&mut tx, asked, plan_id, plan, now).await?;
    D::execute(
        &mut tx,
        "UPDATE plan_submission SET plan_id = $2, body_sha256 = $3 WHERE idempotency_key = $1"
            .into(),
        &[
            key.key.into(),
            plan_id.into(),
            key.body_sha256.as_str().into(),
        ],
    )
    .await?;
    D::commit(tx).await?;
    made.announce(d.signals());
    Ok(Submitted::Created(plan_id))
}

/// The submit's audit entry. A replayed submit (its key seen before)
/// changed nothing and has none.
async fn submitted<D: Dialect>(
    tx: &mut D::Tx,
    asked: &Asked<'_>,
    plan_id: i64,
    plan: &NewPlan,
    now: Ts,
) -> Result<()> {
    asked
        .about(Subject::NamedPlan(plan_id, &plan.name))
        .done::<D>(tx, &detail(plan), now)
        .await
}

/// The submit's audit detail: how many tasks, and whether they start.
fn detail(plan: &NewPlan) -> String {
    let n = plan.tasks.len();
    format!(
        "{n} {}{}",
        if n == 1 { "task" } else { "tasks" },
        if plan.start { "" } else { ", not started" }
    )
}

/// Plan `id` as submitted, for its file ("Submit again", `baton plan
/// export`): the file holds the plan's secrets, so reading it is recorded
/// in the audit log, and the plan is handed out only once that commits.
pub async fn plan_export<D: Dialect>(
    d: &D,
    id: i64,
    by: Person<'_>,
    now: Ts,
) -> Result<StoredPlan> {
    let stored = reads::plan_stored(d, id).await?;
    let mut tx = d.begin().await?;
    Asked::new(by, "plan.export", Subject::Plan(id))
        .done::<D>(&mut tx, "", now)
        .await?;
    D::commit(tx).await?;
    Ok(stored)
}
