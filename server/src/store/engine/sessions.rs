//! Dashboard sign-in sessions (docs/design.md, "Authorization"), each
//! sign-in and sign-out recorded in the audit log in the same transaction,
//! and the statements they run on both backends.

use super::audit::{Asked, Subject};
use super::{Dialect, read_optional};
use crate::store::Result;
use domain::audit::Person;
use domain::time::Ts;

/// A signed-in browser. The cookie holds the token; the store only ever
/// sees its SHA-256, hex-encoded.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Session {
    pub token_hash: String,
    pub user_name: String,
    pub created_at: Ts,
    pub expires_at: Ts,
    /// A digest of the user's password hash when they signed in: the
    /// session ends when the password changes. `None`: made by an older
    /// release, or a user without a password.
    pub credential: Option<String>,
}

pub const SESSION_INSERT: &str = "INSERT INTO session (token_hash, user_name, created_at,
        expires_at, credential) VALUES ($1, $2, $3, $4, $5)";

/// Run before each insert, so the table holds little more than the
/// sessions that are live.
pub const SESSION_PURGE: &str = "DELETE FROM session WHERE expires_at <= $1";

pub const SESSION_GET: &str = "SELECT token_hash, user_name, created_at, expires_at, credential
    FROM session WHERE token_hash = $1 AND expires_at > $2";

pub const SESSION_DELETE: &str = "DELETE FROM session WHERE token_hash = $1";

/// Stores a new sign-in by `by`, and deletes the sessions expired by
/// `now`.
pub async fn session_insert<D: Dialect>(
    d: &D,
    session: &Session,
    by: Person<'_>,
    now: Ts,
) -> Result<()> {
    let mut tx = d.begin().await?;
    D::execute(&mut tx, SESSION_PURGE.into(), &[now.into()]).await?;
    D::execute(
        &mut tx,
        SESSION_INSERT.into(),
        &[
            session.token_hash.as_str().into(),
            session.user_name.as_str().into(),
            session.created_at.into(),
            session.expires_at.into(),
            session.credential.as_deref().into(),
        ],
    )
    .await?;
    Asked::new(by, "auth.sign_in", Subject::Session)
        .done::<D>(&mut tx, "", now)
        .await?;
    D::commit(tx).await
}

/// The session with this token hash, unless it has expired by `now`.
pub async fn session_get<D: Dialect>(d: &D, token_hash: &str, now: Ts) -> Result<Option<Session>> {
    read_optional(d, SESSION_GET, &[token_hash.into(), now.into()]).await
}

/// Ends a session, signed out by `by`; nothing happens (and nothing is
/// recorded) when it is already gone.
pub async fn session_delete<D: Dialect>(
    d: &D,
    token_hash: &str,
    by: Person<'_>,
    now: Ts,
) -> Result<()> {
    let mut tx = d.begin().await?;
    let ended = D::execute(&mut tx, SESSION_DELETE.into(), &[token_hash.into()]).await?;
    if ended > 0 {
        Asked::new(by, "auth.sign_out", Subject::Session)
            .done::<D>(&mut tx, "", now)
            .await?;
    }
    D::commit(tx).await
}
