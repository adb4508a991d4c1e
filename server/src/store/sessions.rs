//! Dashboard sessions, SQL shared by both backends (docs/design.md,
//! "Authorization").

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
