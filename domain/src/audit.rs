//! The audit log: who changed what, when and from where (operator
//! actions, sign-ins, failed sign-ins and sign-outs), as the Audit page,
//! `GET /api/v1/audit` and `baton audit` show it.
//!
//! The filter crosses as text and is checked once on the server, as the
//! runs search's is (`search`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::model::Identity;

/// Every action the log records; an `action` filter is a prefix of some.
/// Stable: scripts filter on them.
pub const ACTIONS: &[&str] = &[
    "auth.sign_in",
    "auth.sign_in_failed",
    "auth.sign_out",
    "plan.approve",
    "plan.cancel",
    "plan.export",
    "plan.pause",
    "plan.resume",
    "plan.retry",
    "plan.start",
    "plan.submit",
    "plans.bulk_cancel",
    "plans.bulk_retry",
    "plans.bulk_skip",
    "runs.bulk_cancel",
    "runs.bulk_retry",
    "runs.bulk_skip",
    "schedule.create",
    "schedule.delete",
    "schedule.pause",
    "schedule.resume",
    "schedule.trigger",
    "schedule.update",
    "target.capacity",
    "target.pause",
    "target.resume",
    "task.approve",
    "task.cancel",
    "task.retry",
    "task.skip",
    "worker.drain",
    "worker.resume",
];

/// An audit search as typed. Every field is optional; empty means "any".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditQuery {
    /// Who acted (or tried to sign in as), exactly.
    pub actor: Option<String>,
    /// The start of an action: `task.` finds every task action,
    /// `auth.sign_in_failed` only failed sign-ins.
    pub action: Option<String>,
    /// Part of what it touched, any case: a plan, task, schedule or
    /// target name, `task 12`.
    pub subject: Option<String>,
    /// At or after: a time (RFC 3339, `2026-11-25T10:00` in UTC, a date)
    /// or a duration ago (`1h`, `7d`).
    pub since: Option<String>,
    /// Before; the same forms as `since`.
    pub until: Option<String>,
}

impl AuditQuery {
    /// Every field's name, as a query parameter.
    pub const PARAMS: &'static [&'static str] = &["actor", "action", "subject", "since", "until"];

    /// The fields as `(name, value)`, empty ones left out, in URL order.
    pub fn pairs(&self) -> Vec<(&'static str, &str)> {
        crate::query::filled(&[
            ("actor", &self.actor),
            ("action", &self.action),
            ("subject", &self.subject),
            ("since", &self.since),
            ("until", &self.until),
        ])
    }

    pub fn is_filtered(&self) -> bool {
        !self.pairs().is_empty()
    }

    /// The query string (without `?`) for these fields plus `extra`.
    pub fn to_query_string(&self, extra: &[(&str, String)]) -> String {
        crate::query::query_string(self.pairs(), extra)
    }
}

/// Whether the change was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Done,
    /// The engine refused it (the status did not allow it, the person
    /// may not, a failed sign-in); nothing changed.
    Refused,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::Refused => "refused",
        }
    }

    pub fn parse(text: &str) -> Option<Outcome> {
        match text {
            "done" => Some(Outcome::Done),
            "refused" => Some(Outcome::Refused),
            _ => None,
        }
    }
}

/// One entry of the log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub id: i64,
    pub at: DateTime<Utc>,
    /// The user; for a failed sign-in, the name that was tried.
    pub actor: String,
    /// The client's IP address as the server saw it.
    pub address: Option<String>,
    /// `X-Forwarded-For` as the client sent it: not checked, not trusted.
    pub forwarded_for: Option<String>,
    pub action: String,
    pub outcome: Outcome,
    /// What it touched, readable.
    pub subject: String,
    /// For links: the plan, task, schedule or target it touched.
    pub plan_id: Option<i64>,
    pub task_id: Option<i64>,
    pub schedule_id: Option<i64>,
    pub target: Option<String>,
    /// How many runs, the capacity set, or why it was refused.
    pub detail: String,
}

/// A page of entries, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditList {
    pub entries: Vec<AuditEntry>,
    /// Pass as `before` for the next, older page; absent on the last page.
    pub next_before: Option<i64>,
}

/// Longest text kept of what a client sent about itself (a name tried
/// at sign-in, `X-Forwarded-For`): enough for any real value, and an
/// unauthenticated client cannot write more than this per entry.
pub const MAX_CLIENT_TEXT: usize = 200;

/// A person asking for a change through the API or the dashboard: the
/// name the change's events carry, and where the request came from. The
/// engine's own transitions (the scheduler, the replicas) have a name
/// only, and are not audited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Person<'a> {
    pub name: &'a str,
    /// The client's IP address as the server's socket saw it.
    pub address: Option<&'a str>,
    /// `X-Forwarded-For` as the client sent it: recorded, never trusted.
    pub forwarded_for: Option<&'a str>,
}

/// A name with no address: tests, and tools that act on the database
/// directly.
impl<'a> From<&'a str> for Person<'a> {
    fn from(name: &'a str) -> Self {
        Person {
            name,
            address: None,
            forwarded_for: None,
        }
    }
}

impl<'a> From<&'a Identity> for Person<'a> {
    fn from(who: &'a Identity) -> Self {
        Person {
            name: &who.name,
            address: who.address.as_deref(),
            forwarded_for: who.forwarded_for.as_deref(),
        }
    }
}

/// `text` cut to [`MAX_CLIENT_TEXT`] characters, control characters
/// dropped: what a client sent, made safe to keep and show.
pub fn client_text(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .take(MAX_CLIENT_TEXT)
        .collect()
}
