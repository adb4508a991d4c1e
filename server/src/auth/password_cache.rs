//! Checks passwords without paying Argon2's cost on every API call.
//!
//! Basic auth sends the password with each request, and one Argon2 check
//! takes tens of milliseconds of CPU: a script polling the API would keep a
//! core busy. So a successful check is remembered for a while, keyed by a
//! SHA-256 of name, password and stored hash (a changed hash in the users
//! file, or a new server, forgets it). Failures are never remembered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use super::secrets::{hash_password, new_token, verify_password};

/// How long a successful check is trusted without Argon2.
const REMEMBER_FOR: Duration = Duration::from_secs(600);
/// Entries kept at most; past this the cache starts over.
const CAPACITY: usize = 4096;
/// Argon2 checks at once: enough to keep two cores busy, and a burst of
/// guesses costs at most this many times Argon2's memory.
const MAX_CHECKS: usize = 4;

pub struct PasswordCache {
    verified: Mutex<HashMap<[u8; 32], Instant>>,
    /// Checked against when a user has no password, so that an unknown
    /// name takes as long as a wrong password and names cannot be probed.
    decoy: String,
    /// Argon2 checks running at once. Each holds its memory cost (19 MiB)
    /// on a blocking thread; unbounded, 200 requests with made-up names
    /// took a replica from 1 to 6 GB. The rest wait their turn here.
    checks: Arc<Semaphore>,
}

impl PasswordCache {
    pub fn new() -> anyhow::Result<Self> {
        Ok(PasswordCache {
            verified: Mutex::new(HashMap::new()),
            decoy: hash_password(&new_token()?)?,
            checks: Arc::new(Semaphore::new(MAX_CHECKS)),
        })
    }

    /// Whether `password` matches `hash` (the user's stored hash; `None`
    /// when the user is unknown or has none, which never matches).
    pub async fn verify(&self, name: &str, password: &str, hash: Option<&str>) -> bool {
        let key = pair_key(name, password, hash);
        let (password, target) = (password.to_owned(), hash.unwrap_or(&self.decoy).to_owned());
        let Ok(permit) = self.checks.clone().acquire_owned().await else {
            return false;
        };
        // The permit goes with the check: a caller that hangs up does not
        // stop a check already running, and must not free its place.
        let matches = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            verify_password(&password, &target)
        })
        .await
        .unwrap_or(false);
        if matches && hash.is_some() {
            let mut verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
            if verified.len() >= CAPACITY {
                verified.clear();
            }
            verified.insert(key, Instant::now());
            return true;
        }
        false
    }

    /// Whether `password` matched `hash` lately, without running Argon2.
    pub fn remembered(&self, name: &str, password: &str, hash: Option<&str>) -> bool {
        hash.is_some() && self.remembered_key(&pair_key(name, password, hash))
    }

    fn remembered_key(&self, key: &[u8; 32]) -> bool {
        let verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        verified
            .get(key)
            .is_some_and(|at| at.elapsed() < REMEMBER_FOR)
    }
}

/// What a remembered check is kept under: no password is kept in memory.
fn pair_key(name: &str, password: &str, hash: Option<&str>) -> [u8; 32] {
    Sha256::new()
        .chain_update(name.as_bytes())
        .chain_update([0])
        .chain_update(password.as_bytes())
        .chain_update([0])
        .chain_update(hash.unwrap_or_default().as_bytes())
        .finalize()
        .into()
}
