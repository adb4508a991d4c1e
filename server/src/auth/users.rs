//! The users file (`BATON_USERS_FILE`): who may sign in, and as what.
//!
//! ```yaml
//! users:
//!   - name: alice
//!     role: operator
//!     password_hash: "$argon2id$v=19$m=19456,t=2,p=1$…"   # baton hash-password
//!   - name: grafana
//!     role: viewer
//!     token_hashes: ["sha256:9f86d08…"]                   # baton new-token
//! agents:                                                  # optional
//!   - name: build-eu
//!     labels: [gpu, eu]
//!     token_hashes: ["sha256:4e07408…"]                   # baton new-token --agent
//! ```
//!
//! An agent's token may only use the worker protocol, and take only runs
//! its labels allow ([`super::agent_tokens`]).
//!
//! Only hashes are kept, so the file can be shared among replicas (a
//! Kubernetes secret, a config-management template) without handing out
//! passwords. Every problem is reported with the field at fault, and the
//! server does not start with a file it cannot read whole.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context;
use argon2::password_hash::phc::PasswordHash;
use domain::model::Role;
use serde::Deserialize;

use super::secrets::{TokenHash, parse_token_hash};

/// The longest user name: a sign-in with a longer one is no user's, and
/// is refused before anything is kept or logged of it.
pub const MAX_USER_NAME_CHARS: usize = crate::plan::limits::MAX_NAME_CHARS;

/// Far more than any real list of users; a path to `/dev/zero` or a log
/// file must not be read into memory whole.
const MAX_USERS_FILE_BYTES: u64 = 1024 * 1024;

/// The file's text, if it is a regular file of sane size that only its
/// owner (and group) may change: whoever can write it decides who is
/// operator, as OpenSSH's `StrictModes` reasons for `authorized_keys`.
fn read_trusted(path: &Path) -> anyhow::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    // Looked at before opening: opening a FIFO waits for a writer.
    let meta = std::fs::metadata(path)?;
    anyhow::ensure!(meta.is_file(), "it is not a regular file");
    let mode = meta.permissions().mode() & 0o7777;
    anyhow::ensure!(
        mode & 0o002 == 0,
        "every user of this machine may write it (mode {mode:04o}), so anyone here could \
         make themselves operator; remove that with `chmod o-w`"
    );
    anyhow::ensure!(
        meta.len() <= MAX_USERS_FILE_BYTES,
        "it is {} bytes, more than the 1 MiB a users file may be",
        meta.len()
    );
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_USERS_FILE_BYTES + 1)
        .read_to_string(&mut text)?;
    anyhow::ensure!(
        text.len() as u64 <= MAX_USERS_FILE_BYTES,
        "it is more than the 1 MiB a users file may be"
    );
    Ok(text)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UsersFile {
    users: Vec<UserEntry>,
    #[serde(default)]
    agents: Vec<super::agent_tokens::AgentEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserEntry {
    name: String,
    role: Role,
    #[serde(default)]
    password_hash: Option<String>,
    #[serde(default)]
    token_hashes: Vec<String>,
}

/// One user as the server checks credentials against.
#[derive(Debug, Clone)]
pub struct User {
    pub name: String,
    pub role: Role,
    /// An Argon2 PHC string, already checked to parse.
    pub password_hash: Option<String>,
    /// What a session remembers of the password it was made with: the
    /// hash's SHA-256 (its salt changes with every new password), made
    /// once here rather than on every request a session makes.
    pub credential: Option<String>,
}

/// The users of one server, by name and by API token.
#[derive(Debug, Clone)]
pub struct Users {
    by_name: HashMap<String, User>,
    by_token: HashMap<TokenHash, String>,
    pub(super) agents: super::agent_tokens::AgentGrants,
}

/// What is wrong with a users file, and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidUsers {
    pub field: String,
    pub message: String,
}

impl Users {
    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> anyhow::Result<Users> {
        let text = read_trusted(path)
            .with_context(|| format!("cannot read the users file {}", path.display()))?;
        Users::parse(&text)
            .with_context(|| format!("the users file {} is not valid", path.display()))
    }

    pub fn parse(text: &str) -> Result<Users, InvalidUsers> {
        let value: serde_json::Value = serde_saphyr::from_str(text)
            .map_err(|e| invalid("users", crate::plan::yaml_problem(&e, "the file")))?;
        let file: UsersFile = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            invalid(
                if path == "." { "users" } else { &path },
                e.inner().to_string(),
            )
        })?;
        if file.users.is_empty() {
            return Err(invalid(
                "users",
                "lists nobody; remove the file to run without users",
            ));
        }
        let mut users = Users {
            by_name: HashMap::new(),
            by_token: HashMap::new(),
            agents: Default::default(),
        };
        for (i, entry) in file.users.into_iter().enumerate() {
            users.add(i, entry)?;
        }
        for (i, entry) in file.agents.into_iter().enumerate() {
            // One token, one kind: a token that is a user's too would let
            // an agent act as that user.
            let owner = |hash: &TokenHash| users.by_token.get(hash).cloned();
            users
                .agents
                .add(i, entry, owner)
                .map_err(|(field, message)| invalid(&field, message))?;
        }
        Ok(users)
    }

    fn add(&mut self, i: usize, entry: UserEntry) -> Result<(), InvalidUsers> {
        let at = |field: &str| format!("users[{i}].{field}");
        let name = entry.name.trim().to_owned();
        if name.is_empty() {
            return Err(invalid(&at("name"), "must not be empty"));
        }
        // Basic auth splits `name:password` at the first colon.
        if name.contains(':') || name.chars().any(char::is_control) {
            return Err(invalid(
                &at("name"),
                format!("`{name}` may not contain `:` or control characters"),
            ));
        }
        if name.chars().count() > MAX_USER_NAME_CHARS {
            return Err(invalid(
                &at("name"),
                format!("must be at most {MAX_USER_NAME_CHARS} characters"),
            ));
        }
        if self.by_name.contains_key(&name) {
            return Err(invalid(&at("name"), format!("`{name}` is listed twice")));
        }
        if let Some(hash) = &entry.password_hash {
            let parsed = PasswordHash::new(hash).map_err(|e| {
                invalid(
                    &at("password_hash"),
                    format!("is not a PHC string ({e}); make one with `baton hash-password`"),
                )
            })?;
            if !parsed.algorithm.as_str().starts_with("argon2") {
                return Err(invalid(
                    &at("password_hash"),
                    format!(
                        "uses `{}`; Baton checks Argon2 hashes only",
                        parsed.algorithm
                    ),
                ));
            }
        }
        if entry.password_hash.is_none() && entry.token_hashes.is_empty() {
            return Err(invalid(
                &at("password_hash"),
                format!("`{name}` has neither a password_hash nor token_hashes, so cannot sign in"),
            ));
        }
        for (j, text) in entry.token_hashes.iter().enumerate() {
            let field = at(&format!("token_hashes[{j}]"));
            let hash = parse_token_hash(text).map_err(|message| invalid(&field, message))?;
            if let Some(other) = self.by_token.insert(hash, name.clone()) {
                return Err(invalid(&field, format!("is already a token of `{other}`")));
            }
        }
        self.by_name.insert(
            name.clone(),
            User {
                name,
                role: entry.role,
                credential: entry
                    .password_hash
                    .as_deref()
                    .map(|hash| super::secrets::token_hash(hash).to_hex()),
                password_hash: entry.password_hash,
            },
        );
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&User> {
        self.by_name.get(name)
    }

    /// The owner of an API token, by the token's hash.
    pub fn by_token(&self, hash: &TokenHash) -> Option<&User> {
        self.by_token.get(hash).and_then(|name| self.get(name))
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

fn invalid(field: &str, message: impl Into<String>) -> InvalidUsers {
    InvalidUsers {
        field: field.to_owned(),
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::secrets::{hash_password, token_hash};

    fn error_of(text: &str) -> InvalidUsers {
        Users::parse(text).expect_err("the file should be refused")
    }

    #[test]
    fn a_valid_file_lists_users_by_name_and_token() {
        let password = hash_password("hunter2").unwrap();
        let token = "baton_0123456789abcdef";
        let text = format!(
            "users:\n  - name: alice\n    role: operator\n    password_hash: \"{password}\"\n  \
             - name: grafana\n    role: viewer\n    token_hashes: [\"{}\"]\n",
            token_hash(token).to_text()
        );
        let users = Users::parse(&text).unwrap();
        assert_eq!(users.get("alice").unwrap().role, Role::Operator);
        assert_eq!(users.get("grafana").unwrap().role, Role::Viewer);
        let owner = users.by_token(&token_hash(token)).unwrap();
        assert_eq!((owner.name.as_str(), owner.role), ("grafana", Role::Viewer));
        assert!(users.by_token(&token_hash("baton_other")).is_none());
    }

    #[test]
    fn mistakes_are_named_with_their_field() {
        let hash = "sha256:".to_owned() + &"a".repeat(64);
        let cases = [
            ("users: []", "users", "lists nobody"),
            (
                "users:\n  - name: a\n    role: admin\n    token_hashes: [x]",
                "users[0].role",
                "unknown variant `admin`",
            ),
            (
                "users:\n  - name: a\n    role: viewer\n    colour: red",
                "users[0].colour",
                "unknown field `colour`",
            ),
            (
                "users:\n  - name: ' '\n    role: viewer",
                "users[0].name",
                "must not be empty",
            ),
            (
                "users:\n  - name: 'a:b'\n    role: viewer",
                "users[0].name",
                "may not contain `:`",
            ),
            (
                "users:\n  - name: a\n    role: viewer",
                "users[0].password_hash",
                "neither a password_hash",
            ),
            (
                "users:\n  - name: a\n    role: viewer\n    password_hash: secret",
                "users[0].password_hash",
                "not a PHC string",
            ),
            (
                "users:\n  - name: a\n    role: viewer\n    token_hashes: [abc]",
                "users[0].token_hashes[0]",
                "sha256:",
            ),
            (
                &format!(
                    "users:\n  - name: a\n    role: viewer\n    token_hashes: ['{hash}']\n  - name: a\n    role: viewer\n    token_hashes: ['{hash}']"
                ),
                "users[1].name",
                "listed twice",
            ),
            (
                &format!(
                    "users:\n  - name: a\n    role: viewer\n    token_hashes: ['{hash}']\n  - name: b\n    role: viewer\n    token_hashes: ['{hash}']"
                ),
                "users[1].token_hashes[0]",
                "already a token of `a`",
            ),
        ];
        for (text, field, message) in cases {
            let error = error_of(text);
            assert_eq!(error.field, field, "{text}: {error}");
            assert!(error.message.contains(message), "{text}: {error}");
        }
    }
}
