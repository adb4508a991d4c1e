//! Webhook delivery (docs/design.md, "Notifications"): every replica sends
//! what the outbox holds. The claim and the outbox rows themselves are
//! written by the store, in the transaction of the status change
//! (`store::notify`).

mod deliverer;
mod signature;

pub use self::deliverer::{DELIVERY_ROUND_BOUND, Deliverer, DeliveryConfig};
pub use self::signature::{SIGNATURE_HEADER, sign, verify};
