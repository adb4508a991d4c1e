//! The store's rules, written once over a [`Dialect`], each beside the SQL
//! it runs. The folders follow docs/design.md: `plans` (submission),
//! `gates` (the promotion round and every gate's writes), `execution`
//! (claim, heartbeats, finish, sweep and what follows an end), `actions`
//! (what an operator asks), `notifications` (claim, outbox, deliveries)
//! and `reads` (what the API and the dashboard show); liveness, schedules,
//! sessions, audit and retention are a file each.
//!
//! Each rule is a generic function over the dialect; one blanket `Store`
//! impl (`store_impl.rs`) calls them for every dialect. The layers, the
//! walk of a run and where to add a gate: `docs/architecture.md`.

pub mod actions;
pub mod audit;
pub mod dialect;
pub mod execution;
pub mod gates;
pub mod liveness;
pub mod notifications;
pub mod plans;
pub mod queue_repair;
pub mod reads;
pub mod retention;
pub mod schedules;
pub mod sessions;
mod shared;
mod store_impl;
pub mod sweep_memory;

pub use dialect::{Arg, Dialect, RowLock, Sql, StoreRow};
pub use gates::admission::Admit;
pub use plans::Made;
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
