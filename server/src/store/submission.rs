//! Idempotent submits: what the store keeps of a submit that carried an
//! `Idempotency-Key`, and what a repeated one gets back.

use std::time::Duration;

/// How long a key stands for its plan; after that the same key makes a new
/// plan, and the old record is deleted by the next keyed submit.
pub const IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// The client's key and a digest of the document it sent with it.
#[derive(Debug, Clone)]
pub struct IdempotencyKey<'a> {
    pub key: &'a str,
    /// SHA-256 of the submitted bytes, in hex.
    pub body_sha256: String,
}

/// What a keyed submit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitted {
    /// A new plan.
    Created(i64),
    /// The key was seen with the same document: the plan it made then.
    Replayed(i64),
    /// The key was seen with another document; nothing was stored.
    KeyReused,
}

/// Decides a keyed submit from the record the key already has, if any.
pub fn decide(existing: Option<(String, Option<i64>)>, body_sha256: &str) -> Option<Submitted> {
    let (stored, plan_id) = existing?;
    Some(match plan_id {
        Some(id) if stored == body_sha256 => Submitted::Replayed(id),
        // The same document, but its plan is gone: cannot happen, as
        // retention keeps a plan while its key stands and the key goes
        // with it; were it to, making it again is what the client asked.
        None if stored == body_sha256 => return None,
        _ => Submitted::KeyReused,
    })
}
