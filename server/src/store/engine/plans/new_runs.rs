//! The one way runs are made after a submit (a start, a retry, an
//! automatic retry, a bulk retry): written, given their dependency edges
//! and announced, so every caller gets all three.

use crate::store::engine::Dialect;
use crate::store::engine::gates::dependencies;
use crate::store::signals::Signal;
use crate::store::{Actor, Result};
use domain::time::Ts;

/// [`Dialect::runs_create`], announced to the other replicas.
pub async fn create_runs<D: Dialect>(
    tx: &mut D::Tx,
    task_ids: &[i64],
    run_at: &[Option<Ts>],
    actor: Actor<'_>,
    detail: &str,
    now: Ts,
) -> Result<Vec<i64>> {
    if task_ids.is_empty() {
        return Ok(Vec::new());
    }
    let created = D::runs_create(tx, task_ids, run_at, actor, detail, now).await?;
    dependencies::runs_created::<D>(tx, &created, now).await?;
    D::announce(tx, Signal::Changed).await?;
    Ok(created)
}
