//! Dashboard sign-in sessions (SPEC §9).

use super::{Dialect, read_optional};
use crate::store::sessions::{self, Session};
use crate::store::{Result, Ts};

/// Stores a new sign-in, and deletes the sessions expired by `now`.
pub async fn session_insert<D: Dialect>(d: &D, session: &Session, now: Ts) -> Result<()> {
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
        ],
    )
    .await?;
    D::commit(tx).await
}

/// The session with this token hash, unless it has expired by `now`.
pub async fn session_get<D: Dialect>(d: &D, token_hash: &str, now: Ts) -> Result<Option<Session>> {
    read_optional(d, sessions::SESSION_GET, &[token_hash.into(), now.into()]).await
}

/// Ends a session; nothing happens when it is already gone.
pub async fn session_delete<D: Dialect>(d: &D, token_hash: &str) -> Result<()> {
    d.write(sessions::SESSION_DELETE.into(), &[token_hash.into()])
        .await?;
    Ok(())
}
