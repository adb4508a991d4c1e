//! Webhook deliveries (docs/design.md, "Notifications"): a replica takes
//! the due ones to send and keeps each attempt's outcome.

use crate::store::Result;
use crate::store::engine::notifications::{self, DeliveryOutcome, DueDelivery};
use crate::store::engine::{Dialect, RowLock, Sql};
use domain::time::Ts;

/// Takes up to `limit` due deliveries for this replica to send, locked to
/// it until `until`.
pub async fn delivery_take_due<D: Dialect>(
    d: &D,
    replica_id: &str,
    limit: i64,
    until: Ts,
    now: Ts,
) -> Result<Vec<DueDelivery>> {
    let lock = D::row_lock(RowLock::TakenDeliveries);
    let sql = notifications::DELIVERY_TAKE.replace("{lock}", lock);
    // Room to pass over rows of destinations that fill their share of this take.
    let looked_at = limit.saturating_mul(4);
    d.write_returning(
        Sql::built(sql),
        &[
            replica_id.into(),
            limit.into(),
            now.into(),
            until.into(),
            looked_at.into(),
            notifications::IN_FLIGHT_PER_DESTINATION.into(),
        ],
    )
    .await
}

/// Keeps one delivery attempt and what happens next.
pub async fn delivery_record<D: Dialect>(
    d: &D,
    replica_id: &str,
    delivery: &DueDelivery,
    outcome: &DeliveryOutcome,
    now: Ts,
) -> Result<()> {
    let attempt = delivery.attempts + 1;
    let mut tx = d.begin().await?;
    D::execute(
        &mut tx,
        notifications::ATTEMPT_INSERT.into(),
        &[
            delivery.id.into(),
            attempt.into(),
            replica_id.into(),
            now.into(),
            outcome.status_code.into(),
            (&outcome.error).into(),
        ],
    )
    .await?;
    D::execute(
        &mut tx,
        notifications::DELIVERY_UPDATE.into(),
        &[
            delivery.id.into(),
            attempt.into(),
            replica_id.into(),
            now.into(),
            outcome.status_code.into(),
            (&outcome.error).into(),
            outcome.state().into(),
            outcome.retry_at.into(),
        ],
    )
    .await?;
    D::commit(tx).await
}
