//! The store's rules, written once over a [`Dialect`]: which status each
//! action needs and what its refusal says, what follows a finish (retry,
//! notification claim, outbox), leases, replicas, sessions and the reads
//! the API and the dashboard make.
//!
//! Each rule is a generic function over the dialect; one blanket `Store`
//! impl (`store_impl.rs`) calls them for every dialect. The layers, the
//! walk of a run and where to add a gate: `docs/architecture.md`.

pub mod actions;
pub mod approvals;
pub mod audit;
pub mod brakes;
pub mod bulk;
pub mod deliveries;
pub mod dependencies;
pub mod dialect;
pub mod endings;
pub mod execution;
pub mod liveness;
pub mod new_runs;
pub mod outcomes;
pub mod pins;
pub mod plan_bulk;
pub mod promote;
pub mod reads;
pub mod retention;
pub mod schedules;
pub mod sessions;
mod shared;
mod store_impl;
pub mod submit;

pub use dialect::{Arg, Dialect, RowLock, Sql, StoreRow};
pub use shared::Shared;

use super::Result;

/// Ids per statement that lists them: far below both databases' limits
/// on arguments.
pub const BATCH: usize = 500;

/// `$from, $from+1, …` for `n` arguments of an `IN (…)` list.
pub fn placeholders(from: usize, n: usize) -> String {
    (from..from + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Ids as statement arguments.
pub fn id_args(ids: &[i64]) -> Vec<Arg<'static>> {
    ids.iter().map(|&id| Arg::from(id)).collect()
}

/// The one row a statement returns in `tx` (an error when there is none).
pub async fn one<D: Dialect, R: StoreRow>(
    tx: &mut D::Tx,
    sql: impl Into<Sql> + Send,
    args: &[Arg<'_>],
) -> Result<R> {
    optional::<D, R>(tx, sql, args)
        .await?
        .ok_or_else(|| sqlx::Error::RowNotFound.into())
}

/// The first row a statement returns in `tx`, if any.
pub async fn optional<D: Dialect, R: StoreRow>(
    tx: &mut D::Tx,
    sql: impl Into<Sql> + Send,
    args: &[Arg<'_>],
) -> Result<Option<R>> {
    Ok(D::fetch_all(tx, sql.into(), args).await?.into_iter().next())
}

/// The first row a read returns, if any.
pub async fn read_optional<D: Dialect, R: StoreRow>(
    d: &D,
    sql: impl Into<Sql> + Send,
    args: &[Arg<'_>],
) -> Result<Option<R>> {
    Ok(d.read(sql.into(), args).await?.into_iter().next())
}

/// The one row a read returns (an error when there is none).
pub async fn read_one<D: Dialect, R: StoreRow>(
    d: &D,
    sql: impl Into<Sql> + Send,
    args: &[Arg<'_>],
) -> Result<R> {
    read_optional(d, sql, args)
        .await?
        .ok_or_else(|| sqlx::Error::RowNotFound.into())
}
