//! Passwords, API tokens and session tokens: how each is made and checked.
//!
//! Passwords are hashed with Argon2id (slow on purpose: they are guessable).
//! API and session tokens are 256 random bits, so a plain SHA-256 is enough
//! to keep them out of files and tables, and lets a token be found by hash.

use argon2::Argon2;
use argon2::password_hash::phc::PasswordHash;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use sha2::{Digest, Sha256};

/// What every API token starts with, so secret scanners and people can
/// tell a Baton token from other strings.
const TOKEN_PREFIX: &str = "baton_";
const HASH_PREFIX: &str = "sha256:";

/// A SHA-256 of a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TokenHash(pub [u8; 32]);

impl TokenHash {
    /// `sha256:<hex>`, as the users file holds it.
    pub fn to_text(self) -> String {
        format!("{HASH_PREFIX}{}", hex::encode(self.0))
    }

    /// Plain hex, as the session table holds it.
    pub fn to_hex(self) -> String {
        hex::encode(self.0)
    }
}

pub fn token_hash(token: &str) -> TokenHash {
    TokenHash(Sha256::digest(token.as_bytes()).into())
}

/// Reads `sha256:<64 hex digits>`; the error says what it should be.
pub fn parse_token_hash(text: &str) -> Result<TokenHash, String> {
    let wrong = || {
        format!("`{text}` is not `sha256:` and 64 hex digits; make a token with `baton new-token`")
    };
    let digits = text.trim().strip_prefix(HASH_PREFIX).ok_or_else(wrong)?;
    let mut hash = [0u8; 32];
    hex::decode_to_slice(digits, &mut hash).map_err(|_| wrong())?;
    Ok(TokenHash(hash))
}

/// A fresh random token: `baton_` and 64 hex digits.
pub fn new_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("the system's random source failed: {e}"))?;
    Ok(format!("{TOKEN_PREFIX}{}", hex::encode(bytes)))
}

/// An Argon2id PHC string with a random salt and the crate's default
/// (OWASP-recommended) cost.
pub fn hash_password(password: &str) -> anyhow::Result<String> {
    Argon2::default()
        .hash_password(password.as_bytes())
        .map(|hash| hash.to_string())
        .map_err(|e| anyhow::anyhow!("cannot hash the password: {e}"))
}

/// Whether `password` matches `phc`. Slow by design (tens of ms): callers
/// on the async runtime use `spawn_blocking`.
pub fn verify_password(password: &str, phc: &str) -> bool {
    PasswordHash::new(phc)
        .map(|hash| {
            Argon2::default()
                .verify_password(password.as_bytes(), &hash)
                .is_ok()
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_verifies_against_its_own_hash_only() {
        let hash = hash_password("correct horse").unwrap();
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        assert!(verify_password("correct horse", &hash));
        assert!(!verify_password("correct hors", &hash));
        assert!(!verify_password("correct horse", "not a hash"));
        assert_ne!(hash, hash_password("correct horse").unwrap(), "salted");
    }

    #[test]
    fn tokens_are_random_and_their_hashes_read_back() {
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_ne!(a, b);
        assert!(a.starts_with("baton_") && a.len() == 6 + 64, "{a}");
        let hash = token_hash(&a);
        assert_eq!(parse_token_hash(&hash.to_text()), Ok(hash));
        assert!(parse_token_hash(&hash.to_hex()).is_err(), "prefix required");
        assert!(
            parse_token_hash("sha256:xyz")
                .unwrap_err()
                .contains("64 hex")
        );
    }
}
