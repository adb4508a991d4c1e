//! Reads the users file again whenever it changes, so a user or an agent
//! token removed from it is refused by a running replica within seconds,
//! without a restart (docs/security.md, docs/agents.md "Tokens"). A file
//! that no longer reads or checks leaves the users as they were, and says
//! so in the log.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::{Auth, Users};

/// How often the file is looked at: a revoked token works this much
/// longer at most.
pub const RELOAD_EVERY: Duration = Duration::from_secs(2);

/// Watches `path` until `stop`, putting each changed file that checks
/// out in force.
pub async fn watch_users_file(auth: Arc<Auth>, path: PathBuf, stop: CancellationToken) {
    let mut seen = fingerprint(&path);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(RELOAD_EVERY) => {}
            _ = stop.cancelled() => return,
        }
        let now = fingerprint(&path);
        if now == seen {
            continue;
        }
        seen = now;
        match Users::load(&path) {
            Ok(users) => {
                tracing::info!(file = %path.display(), users = users.len(),
                    agent_tokens = users.agents.len(), "users file changed; now in force");
                auth.users_set(users);
            }
            Err(e) => tracing::error!(file = %path.display(),
                "users file changed but cannot be used, so the users stay as they were: {e:#}"),
        }
    }
}

/// What the file holds now, as a hash (`None` when it cannot be read).
fn fingerprint(path: &std::path::Path) -> Option<[u8; 32]> {
    let bytes = std::fs::read(path).ok()?;
    Some(Sha256::digest(&bytes).into())
}
