//! The audit log: an entry for every change a person asks for, written
//! in the change's own transaction (an action that rolls back leaves
//! none), and one for each refusal, written on its own afterwards.
//!
//! Refusals are recorded because an incident review asks what people
//! tried as well as what they did: a cancel refused because the run had
//! ended, a bulk retry refused because the set changed under the
//! operator's eyes, an approval refused by the approver list. Those are
//! the engine's 409, 403 and 422 answers. A 404 (no such plan or task)
//! touched nothing and is not recorded, nor is a database error (nothing
//! was decided, and the database may not take the entry either).
//!
//! The scheduler's and replicas' own transitions are not audited: the
//! event history records them.
//!
//! Below the engine's functions: what a row holds and the search's SQL,
//! the same on both backends.

use domain::audit::{AuditEntry, AuditList, Outcome, Person, client_text};
use domain::filter::audit::AuditFilter;

use super::Arg;
use super::{Dialect, optional};
use crate::store::engine::reads::plan_list_sql::{folded, name_pattern};
use crate::store::{Backend, Result, StoreError};
use domain::time::Ts;

/// What an entry touched. Names are read when the entry is written and
/// kept as text, so the entry still says what it was after a plan is
/// pruned or a schedule deleted.
#[derive(Debug, Clone)]
pub enum Subject<'a> {
    Plan(i64),
    /// A plan whose name is at hand (one just submitted): nothing to read.
    NamedPlan(i64, &'a str),
    Task(i64),
    Schedule(i64),
    Target(&'a str),
    /// A replica or agent, by its id (draining).
    Worker(&'a str),
    /// Something being created, by kind and name: what a refused submit
    /// names (a created one is recorded under its id, [`Asked::about`]).
    New(&'static str, &'a str),
    /// The filter a bulk action acted on, described (`runs status=FAILED`,
    /// `plans name=orders`).
    Filter(String),
    /// A dashboard session (signing in and out).
    Session,
}

/// A change a person asked for: who, which action, on what. The engine
/// records it when the change commits ([`Asked::done`]); the store,
/// when the engine refuses it ([`Asked::settle`]).
#[derive(Debug, Clone)]
pub struct Asked<'a> {
    pub by: Person<'a>,
    /// A stable verb of [`domain::audit::ACTIONS`].
    pub action: &'static str,
    pub subject: Subject<'a>,
}

impl<'a> Asked<'a> {
    pub fn new(by: Person<'a>, action: &'static str, subject: Subject<'a>) -> Self {
        Asked {
            by,
            action,
            subject,
        }
    }

    /// The same request, about `subject` (a plan or schedule just made).
    pub fn about(&self, subject: Subject<'a>) -> Asked<'a> {
        Asked {
            subject,
            ..self.clone()
        }
    }

    /// Records the change in `tx`, the transaction that makes it.
    pub async fn done<D: Dialect>(&self, tx: &mut D::Tx, detail: &str, now: Ts) -> Result<()> {
        write::<D>(tx, self, Outcome::Done, detail, now).await
    }

    /// Passes `result` on; when it is a refusal, records it first in a
    /// transaction of its own (the refused change's wrote nothing, and has
    /// ended). Failing to record it is logged, and the refusal still
    /// answered.
    pub async fn settle<D: Dialect, T>(&self, d: &D, result: Result<T>, now: Ts) -> Result<T> {
        let reason = match &result {
            Err(
                StoreError::Conflict(why) | StoreError::Forbidden(why) | StoreError::Invalid(why),
            ) => why.clone(),
            Ok(_) => {
                // What a person did shows on the dashboard at once: its
                // live feeds move, even for a change no engine loop waits
                // for (a schedule edit raises no signal of its own).
                d.signals().touch();
                return result;
            }
            Err(_) => return result,
        };
        let recorded = async {
            let mut tx = d.begin().await?;
            write::<D>(&mut tx, self, Outcome::Refused, &reason, now).await?;
            D::commit(tx).await
        };
        match recorded.await {
            // The Audit page shows the refusal.
            Ok(()) => d.signals().touch(),
            Err(e) => {
                tracing::warn!(error = %e, action = self.action, "cannot record a refused action")
            }
        }
        result
    }
}

/// What an entry's subject columns hold.
#[derive(Default)]
struct Named {
    text: String,
    plan_id: Option<i64>,
    task_id: Option<i64>,
    schedule_id: Option<i64>,
    target: Option<String>,
}

/// The subject's names as they stand in `tx`; its id alone when it is
/// gone (a refusal can name what does not exist).
async fn named<D: Dialect>(tx: &mut D::Tx, subject: &Subject<'_>) -> Result<Named> {
    Ok(match subject {
        Subject::Plan(id) => Named {
            text: name_of::<D>(tx, "plan", "SELECT name FROM plan WHERE id = $1", *id).await?,
            plan_id: Some(*id),
            ..Named::default()
        },
        Subject::NamedPlan(id, name) => Named {
            text: format!("plan {id} {name}"),
            plan_id: Some(*id),
            ..Named::default()
        },
        Subject::Task(id) => {
            let found: Option<(String, i64, String)> = optional::<D, _>(
                tx,
                "SELECT t.name, p.id, p.name FROM task t JOIN plan p ON p.id = t.plan_id
                 WHERE t.id = $1",
                &[(*id).into()],
            )
            .await?;
            match found {
                Some((task, plan_id, plan)) => Named {
                    text: format!("task {id} {task} of plan {plan_id} {plan}"),
                    plan_id: Some(plan_id),
                    task_id: Some(*id),
                    ..Named::default()
                },
                None => Named {
                    text: format!("task {id}"),
                    task_id: Some(*id),
                    ..Named::default()
                },
            }
        }
        Subject::Schedule(id) => Named {
            text: name_of::<D>(
                tx,
                "schedule",
                "SELECT name FROM schedule WHERE id = $1",
                *id,
            )
            .await?,
            schedule_id: Some(*id),
            ..Named::default()
        },
        Subject::Target(target) => {
            let target = client_text(target.trim());
            Named {
                text: format!("target {target}"),
                target: Some(target),
                ..Named::default()
            }
        }
        Subject::Worker(id) => Named {
            text: format!("worker {}", client_text(id)),
            ..Named::default()
        },
        Subject::New(kind, name) => Named {
            text: format!("{kind} {}", client_text(name)),
            ..Named::default()
        },
        Subject::Filter(described) => Named {
            text: described.clone(),
            ..Named::default()
        },
        Subject::Session => Named {
            text: "dashboard session".to_owned(),
            ..Named::default()
        },
    })
}

/// `kind id name` as `sql` (by id) reads the name; `kind id` when the
/// row is gone.
async fn name_of<D: Dialect>(
    tx: &mut D::Tx,
    kind: &str,
    sql: &'static str,
    id: i64,
) -> Result<String> {
    let name: Option<(String,)> = optional::<D, _>(tx, sql, &[id.into()]).await?;
    Ok(match name {
        Some((name,)) => format!("{kind} {id} {name}"),
        None => format!("{kind} {id}"),
    })
}

async fn write<D: Dialect>(
    tx: &mut D::Tx,
    asked: &Asked<'_>,
    outcome: Outcome,
    detail: &str,
    now: Ts,
) -> Result<()> {
    let named = named::<D>(tx, &asked.subject).await?;
    D::execute(
        tx,
        AUDIT_INSERT.into(),
        &[
            now.into(),
            asked.by.name.into(),
            asked.by.address.into(),
            asked.by.forwarded_for.into(),
            asked.action.into(),
            outcome.as_str().into(),
            named.text.as_str().into(),
            named.plan_id.into(),
            named.task_id.into(),
            named.schedule_id.into(),
            named.target.as_deref().into(),
            detail.into(),
        ],
    )
    .await?;
    Ok(())
}

/// Entries `filter` matches with ids below `before`, newest first, at
/// most `limit`.
pub async fn audit_list<D: Dialect>(
    d: &D,
    filter: &domain::filter::audit::AuditFilter,
    before: Option<i64>,
    limit: i64,
) -> Result<domain::audit::AuditList> {
    let (sql, values) = list_sql(filter, D::BACKEND);
    let mut args = vec![before.unwrap_or(i64::MAX).into(), (limit + 1).into()];
    args.extend(values.iter().map(|v| v.arg()));
    // Planned for its actual arguments: which index serves depends on
    // which filters are set.
    let rows: Vec<AuditRow> = d.read(super::Sql::built(sql).unprepared(), &args).await?;
    page(rows, limit as usize)
}

/// Deletes up to `limit` entries older than `cutoff`, oldest first; how
/// many.
pub async fn audit_prune<D: Dialect>(d: &D, cutoff: Ts, limit: i64) -> Result<u64> {
    d.write(AUDIT_PRUNE.into(), &[cutoff.into(), limit.into()])
        .await
}

/// A failed sign-in: there is no change to attach it to.
pub async fn sign_in_failed<D: Dialect>(
    d: &D,
    by: Person<'_>,
    reason: &str,
    now: Ts,
) -> Result<()> {
    let asked = Asked::new(by, "auth.sign_in_failed", Subject::Session);
    let mut tx = d.begin().await?;
    write::<D>(&mut tx, &asked, Outcome::Refused, reason, now).await?;
    D::commit(tx).await
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
