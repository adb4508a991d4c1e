//! Dashboard sign-in sessions (docs/design.md, "Authorization"), each
//! sign-in and sign-out recorded in the audit log in the same transaction.

use super::audit::{Asked, Subject};
use super::{Dialect, read_optional};
use crate::store::Result;
use crate::store::audit::Person;
use crate::store::sessions::{self, Session};
use domain::time::Ts;

/// Stores a new sign-in by `by`, and deletes the sessions expired by
/// `now`.
pub async fn session_insert<D: Dialect>(
    d: &D,
    session: &Session,
    by: Person<'_>,
    now: Ts,
) -> Result<()> {
    let mut tx = d.begin().await?;
    D::execute(&mut tx, sessions::SESSION_PURGE.into(), &[now.into()]).await?;
    D::execute(
        &mut tx,
        sessions::SESSION_INSERT.into(),
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
    read_optional(d, sessions::SESSION_GET, &[token_hash.into(), now.into()]).await
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
    let ended = D::execute(
        &mut tx,
        sessions::SESSION_DELETE.into(),
        &[token_hash.into()],
    )
    .await?;
    if ended > 0 {
        Asked::new(by, "auth.sign_out", Subject::Session)
            .done::<D>(&mut tx, "", now)
            .await?;
    }
    D::commit(tx).await
}
