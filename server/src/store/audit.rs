//! The audit log's rows and its search, SQL shared by both backends.
//!
//! Entries are written by the engine (`engine/audit.rs`) in the
//! transaction of the change they record; this is what they hold and
//! how they are read back.

use domain::audit::{AuditEntry, AuditList, Outcome};
use domain::model::Identity;

use super::engine::Arg;
use super::plan_list::{folded, name_pattern};
use super::{Backend, Result, StoreError};
use domain::filter::audit::AuditFilter;
use domain::time::Ts;

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

pub const AUDIT_INSERT: &str = "INSERT INTO audit (at, actor, address, forwarded_for, action,
        outcome, subject, plan_id, task_id, schedule_id, target, detail)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";

/// Retention: the oldest entries before `$1`, `$2` at most, through
/// `audit_at`.
pub const AUDIT_PRUNE: &str = "DELETE FROM audit WHERE id IN (
        SELECT id FROM audit WHERE at < $1 ORDER BY at LIMIT $2)";

/// The search: entries `filter` matches with ids below `$1`, newest
/// first, at most `$2`; the filters' arguments follow from `$3`.
pub fn list_sql(filter: &AuditFilter, backend: Backend) -> (String, Vec<ListArg>) {
    let mut wheres = vec!["id < $1".to_owned()];
    let mut args = Vec::new();
    if let Some(actor) = &filter.actor {
        let n = arg(ListArg::Text(actor.clone()), &mut args);
        wheres.push(format!("actor = {n}"));
    }
    if let Some(actions) = &filter.actions {
        let list: Vec<String> = actions
            .iter()
            .map(|a| arg(ListArg::Text((*a).to_owned()), &mut args))
            .collect();
        wheres.push(format!("action IN ({})", list.join(", ")));
    }
    if let Some(subject) = &filter.subject {
        let n = arg(ListArg::Text(name_pattern(subject)), &mut args);
        let subject = folded("subject", backend);
        wheres.push(format!("{subject} LIKE {n} ESCAPE '\\'"));
    }
    if let Some(since) = filter.since {
        let n = arg(ListArg::Time(since.into()), &mut args);
        wheres.push(format!("at >= {n}"));
    }
    if let Some(until) = filter.until {
        let n = arg(ListArg::Time(until.into()), &mut args);
        wheres.push(format!("at < {n}"));
    }
    let sql = format!(
        "SELECT id, at, actor, address, forwarded_for, action, outcome, subject, plan_id,
            task_id, schedule_id, target, detail
        FROM audit WHERE {} ORDER BY id DESC LIMIT $2",
        wheres.join(" AND ")
    );
    (sql, args)
}

/// Adds a filter argument; its placeholder.
fn arg(value: ListArg, args: &mut Vec<ListArg>) -> String {
    args.push(value);
    format!("${}", args.len() + 2)
}

/// A filter argument, owned so that patterns built here outlive the call.
pub enum ListArg {
    Text(String),
    Time(Ts),
}

impl ListArg {
    pub fn arg(&self) -> Arg<'_> {
        match self {
            ListArg::Text(text) => Arg::from(text.as_str()),
            ListArg::Time(at) => Arg::from(*at),
        }
    }
}

#[derive(sqlx::FromRow)]
pub struct AuditRow {
    pub id: i64,
    pub at: Ts,
    pub actor: String,
    pub address: Option<String>,
    pub forwarded_for: Option<String>,
    pub action: String,
    pub outcome: String,
    pub subject: String,
    pub plan_id: Option<i64>,
    pub task_id: Option<i64>,
    pub schedule_id: Option<i64>,
    pub target: Option<String>,
    pub detail: String,
}

/// The page: the first `limit` rows, and the cursor past them when more
/// were read.
pub fn page(rows: Vec<AuditRow>, limit: usize) -> Result<AuditList> {
    let more = rows.len() > limit;
    let entries = rows
        .into_iter()
        .take(limit)
        .map(|r| {
            let outcome = Outcome::parse(&r.outcome).ok_or_else(|| {
                StoreError::Corrupt(format!("audit {} has outcome {:?}", r.id, r.outcome))
            })?;
            Ok(AuditEntry {
                id: r.id,
                at: r.at.0,
                actor: r.actor,
                address: r.address,
                forwarded_for: r.forwarded_for,
                action: r.action,
                outcome,
                subject: r.subject,
                plan_id: r.plan_id,
                task_id: r.task_id,
                schedule_id: r.schedule_id,
                target: r.target,
                detail: r.detail,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let next_before = more.then(|| entries.last().map(|e| e.id)).flatten();
    Ok(AuditList {
        entries,
        next_before,
    })
}
