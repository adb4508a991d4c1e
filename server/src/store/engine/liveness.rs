//! Liveness records (docs/design.md, "Liveness"): named leases the
//! singleton loops run under, and each replica's heartbeat row.

use std::time::Duration;

use super::{Dialect, one, read_optional};
use crate::store::liveness::{self, Lease};
use crate::store::{ReplicaInfo, Result, rows};
use domain::time::Ts;

/// Takes the named lease if it is free or expired, or renews it if
/// `holder` has it; returns the lease as it now stands.
pub async fn lease_acquire<D: Dialect>(
    d: &D,
    name: &str,
    holder: &str,
    ttl: Duration,
    now: Ts,
) -> Result<Lease> {
    let mut tx = d.begin().await?;
    D::execute(
        &mut tx,
        liveness::LEASE_ACQUIRE.into(),
        &[name.into(), holder.into(), now.into(), now.plus(ttl).into()],
    )
    .await?;
    let lease = one::<D, Lease>(&mut tx, liveness::LEASE_GET, &[name.into()]).await?;
    D::commit(tx).await?;
    Ok(lease)
}

/// Gives the lease up at once, if `holder` has it.
pub async fn lease_release<D: Dialect>(d: &D, name: &str, holder: &str) -> Result<()> {
    d.write(
        liveness::LEASE_RELEASE.into(),
        &[name.into(), holder.into()],
    )
    .await?;
    Ok(())
}

pub async fn lease_get<D: Dialect>(d: &D, name: &str) -> Result<Option<Lease>> {
    read_optional(d, liveness::LEASE_GET, &[name.into()]).await
}

pub async fn replica_upsert<D: Dialect>(d: &D, replica: &ReplicaInfo, now: Ts) -> Result<()> {
    let labels = serde_json::to_string(&replica.labels).unwrap_or_else(|_| "[]".into());
    d.heartbeat_write(
        rows::REPLICA_UPSERT.into(),
        &[
            replica.replica_id.as_str().into(),
            replica.hostname.as_str().into(),
            labels.as_str().into(),
            replica.version.as_str().into(),
            replica.started_at.into(),
            now.into(),
            // The skew this process measured last (0 before any sample).
            domain::time::clock::skew().num_milliseconds().into(),
        ],
    )
    .await?;
    Ok(())
}

pub async fn replica_delete<D: Dialect>(d: &D, replica_id: &str) -> Result<()> {
    d.write(rows::REPLICA_DELETE.into(), &[replica_id.into()])
        .await?;
    Ok(())
}

/// Deletes heartbeat rows last written before `before`; returns how many.
pub async fn replica_prune<D: Dialect>(d: &D, before: Ts) -> Result<u64> {
    d.write(liveness::REPLICA_PRUNE.into(), &[before.into()])
        .await
}
