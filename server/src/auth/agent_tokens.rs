//! Agent tokens: the `agents:` of the users file (docs/agents.md,
//! "Tokens"). An agent token is its own kind: it opens only the worker
//! protocol (`/api/v1/worker/`), never a page or another endpoint, and its
//! agent may declare, and so take runs pinned to, only the labels listed
//! with it. Removing an entry revokes the token within seconds: the
//! replicas read the file again when it changes (`reload.rs`).

use std::collections::HashMap;

use serde::Deserialize;

use super::secrets::{TokenHash, parse_token_hash};

/// The longest agent name: as a user's.
const MAX_NAME_CHARS: usize = crate::plan::limits::MAX_NAME_CHARS;

/// What is wrong with an entry: the field at fault and why. The users
/// file reports it as it reports its own.
pub type Mistake = (String, String);

fn mistake(field: &str, message: impl Into<String>) -> Mistake {
    (field.to_owned(), message.into())
}

/// Ids of agents start with this, then their token's name.
pub const AGENT_ID_PREFIX: &str = "a-";

/// The most labels one agent may carry: far more than a machine has.
pub const MAX_LABELS: usize = 64;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentEntry {
    name: String,
    #[serde(default)]
    labels: Vec<String>,
    token_hashes: Vec<String>,
}

/// Who may run as an agent, by token.
#[derive(Debug, Clone, Default)]
pub struct AgentGrants {
    by_token: HashMap<TokenHash, AgentGrant>,
    names: HashMap<String, usize>,
}

/// What one agent token allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentGrant {
    /// The entry's name: the agent's id starts with it.
    pub name: String,
    /// The labels its agent may declare; `None` on a server without users,
    /// where anyone on the loopback may run any agent.
    pub labels: Option<Vec<String>>,
}

impl AgentGrant {
    /// The grant of a server without users (loopback only).
    pub fn open() -> Self {
        AgentGrant {
            name: crate::auth::ANONYMOUS.into(),
            labels: None,
        }
    }

    /// Refuses labels the token does not allow, naming them.
    pub fn check_labels(&self, declared: &[String]) -> Result<(), String> {
        check_labels(declared)?;
        let Some(allowed) = &self.labels else {
            return Ok(());
        };
        let beyond: Vec<&str> = declared
            .iter()
            .filter(|l| !allowed.contains(l))
            .map(String::as_str)
            .collect();
        if beyond.is_empty() {
            return Ok(());
        }
        Err(format!(
            "the agent token `{}` allows the labels [{}], not [{}]",
            self.name,
            allowed.join(", "),
            beyond.join(", ")
        ))
    }

    /// Whether `agent_id` is one this token's hello could have named.
    pub fn owns(&self, agent_id: &str) -> bool {
        agent_id
            .strip_prefix(AGENT_ID_PREFIX)
            .and_then(|rest| rest.strip_prefix(self.name.as_str()))
            .is_some_and(|rest| rest.starts_with('-'))
    }
}

/// Labels as an agent may carry them: a few, each a short printable word
/// (a pin names one; a comma would split it on the command line).
pub fn check_labels(labels: &[String]) -> Result<(), String> {
    if labels.len() > MAX_LABELS {
        return Err(format!(
            "{} labels are more than the {MAX_LABELS} an agent may carry",
            labels.len()
        ));
    }
    for label in labels {
        let bad = label.is_empty()
            || label.trim() != label
            || label.chars().count() > crate::plan::limits::MAX_NAME_CHARS
            || label.chars().any(|c| c.is_control() || c == ',');
        if bad {
            return Err(format!(
                "the label {label:?} must be 1 to {} characters without spaces at its ends, \
                 commas or control characters",
                crate::plan::limits::MAX_NAME_CHARS
            ));
        }
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentsSection {
    agents: Vec<AgentEntry>,
}

/// Checks an `agents:` section alone as the users file checks it
/// (`baton new-token --agent`, before it prints an entry).
pub fn check_section(text: &str) -> Result<(), Mistake> {
    let section: AgentsSection =
        serde_saphyr::from_str(text).map_err(|e| mistake("agents", e.to_string()))?;
    let mut grants = AgentGrants::default();
    for (i, entry) in section.agents.into_iter().enumerate() {
        grants.add(i, entry, |_| None)?;
    }
    Ok(())
}

impl AgentGrants {
    /// Adds the `i`th entry; `user_of` names the user a token hash
    /// already belongs to, if any.
    pub(super) fn add(
        &mut self,
        i: usize,
        entry: AgentEntry,
        user_of: impl Fn(&TokenHash) -> Option<String>,
    ) -> Result<(), Mistake> {
        let at = |field: &str| format!("agents[{i}].{field}");
        let name = entry.name.trim().to_owned();
        // The name goes into agent ids and so into logs and URLs.
        let fine = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if name.is_empty() || name.chars().count() > MAX_NAME_CHARS || !name.chars().all(fine) {
            return Err(mistake(
                &at("name"),
                format!("`{name}` must be 1 to {MAX_NAME_CHARS} letters, digits, `-`, `_` or `.`"),
            ));
        }
        if let Some(j) = self.names.insert(name.clone(), i) {
            return Err(mistake(
                &at("name"),
                format!("`{name}` is listed twice (agents[{j}])"),
            ));
        }
        check_labels(&entry.labels).map_err(|m| mistake(&at("labels"), m))?;
        if entry.token_hashes.is_empty() {
            return Err(mistake(
                &at("token_hashes"),
                format!("`{name}` has no token, so no agent can use it"),
            ));
        }
        for (j, text) in entry.token_hashes.iter().enumerate() {
            let field = at(&format!("token_hashes[{j}]"));
            let hash = parse_token_hash(text).map_err(|message| mistake(&field, message))?;
            if let Some(user) = user_of(&hash) {
                return Err(mistake(
                    &field,
                    format!("is already a token of the user `{user}`; an agent needs its own"),
                ));
            }
            let grant = AgentGrant {
                name: name.clone(),
                labels: Some(entry.labels.clone()),
            };
            if let Some(other) = self.by_token.insert(hash, grant) {
                return Err(mistake(
                    &field,
                    format!("is already a token of the agent `{}`", other.name),
                ));
            }
        }
        Ok(())
    }

    pub fn by_token(&self, hash: &TokenHash) -> Option<&AgentGrant> {
        self.by_token.get(hash)
    }

    /// How many agent tokens there are.
    pub(crate) fn len(&self) -> usize {
        self.by_token.len()
    }
}

#[cfg(test)]
mod tests {
    use crate::auth::Users;
    use crate::auth::secrets::token_hash;

    fn file(agents: &str) -> String {
        format!(
            "users:\n  - name: alice\n    role: operator\n    token_hashes: [\"{}\"]\nagents:\n{agents}",
            token_hash("baton_alice").to_text()
        )
    }

    #[test]
    fn an_agent_token_grants_its_labels_and_nothing_else() {
        let text = file(&format!(
            "  - name: build-eu\n    labels: [gpu, eu]\n    token_hashes: [\"{}\"]\n",
            token_hash("baton_agent").to_text()
        ));
        let users = Users::parse(&text).unwrap();
        let grant = users.agents.by_token(&token_hash("baton_agent")).unwrap();
        assert_eq!(grant.name, "build-eu");
        assert!(grant.check_labels(&["gpu".into()]).is_ok());
        let refused = grant
            .check_labels(&["gpu".into(), "prod".into()])
            .unwrap_err();
        assert!(refused.contains("[gpu, eu], not [prod]"), "{refused}");
        assert!(grant.owns("a-build-eu-0123abcd"));
        assert!(!grant.owns("a-build-eu2-0123abcd"), "another name's id");
        assert!(!grant.owns("r-0123abcd"));
        assert!(
            users.by_token(&token_hash("baton_agent")).is_none(),
            "an agent token is no user's"
        );
    }

    #[test]
    fn mistakes_in_agents_are_named_with_their_field() {
        let hash = token_hash("baton_agent").to_text();
        for (agents, field, says) in [
            (
                format!("  - name: 'a b'\n    token_hashes: [\"{hash}\"]\n"),
                "agents[0].name",
                "letters, digits",
            ),
            (
                "  - name: a\n    token_hashes: []\n".to_owned(),
                "agents[0].token_hashes",
                "no token",
            ),
            (
                format!("  - name: a\n    labels: ['x,y']\n    token_hashes: [\"{hash}\"]\n"),
                "agents[0].labels",
                "commas",
            ),
            (
                format!(
                    "  - name: a\n    token_hashes: [\"{}\"]\n",
                    token_hash("baton_alice").to_text()
                ),
                "agents[0].token_hashes[0]",
                "the user `alice`",
            ),
            (
                format!(
                    "  - name: a\n    token_hashes: [\"{hash}\"]\n  - name: b\n    token_hashes: [\"{hash}\"]\n"
                ),
                "agents[1].token_hashes[0]",
                "the agent `a`",
            ),
        ] {
            let e = Users::parse(&file(&agents)).unwrap_err();
            assert_eq!(e.field, field, "{agents}: {e}");
            assert!(e.message.contains(says), "{agents}: {e}");
        }
    }
}
