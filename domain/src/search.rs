//! The runs search: the filter as an operator types it (query parameters
//! of the Runs page and `GET /api/v1/runs`, flags of `baton runs`), and
//! one page of what it found; and the bulk actions on what a runs search
//! or a plans list matches.
//!
//! The filter crosses as text and is checked on the server, once, for all
//! three: the page, the API and the command line cannot disagree about
//! what `since=1h` or `status=failed` means.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::model::{PlanStatus, RunStatus};

/// A runs search as typed. Every field is optional; empty means "any".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunQuery {
    /// A run status, any case.
    pub status: Option<String>,
    /// The start of a target's name: `db/` finds `db/orders` and `db/users`.
    pub target: Option<String>,
    /// Part of the plan's name, any case.
    pub plan: Option<String>,
    /// The replica that ran it, exactly.
    pub replica: Option<String>,
    /// Someone who acted on it (submitted, retried, cancelled, approved),
    /// exactly.
    pub actor: Option<String>,
    /// Part of a FAILED or CANCELED run's error, any case.
    pub error: Option<String>,
    /// Finished at or after: a time (RFC 3339, or `2026-11-25T10:00` in
    /// UTC) or a duration ago (`1h`, `30m`, `7d`).
    pub since: Option<String>,
    /// Finished before; the same forms as `since`.
    pub until: Option<String>,
}

impl RunQuery {
    /// Every field's name, as a query parameter.
    pub const PARAMS: &'static [&'static str] = &[
        "status", "target", "plan", "replica", "actor", "error", "since", "until",
    ];

    /// The fields as `(name, value)`, empty ones left out, in the order
    /// they appear in a URL.
    pub fn pairs(&self) -> Vec<(&'static str, &str)> {
        crate::query::filled(&[
            ("status", &self.status),
            ("target", &self.target),
            ("plan", &self.plan),
            ("replica", &self.replica),
            ("actor", &self.actor),
            ("error", &self.error),
            ("since", &self.since),
            ("until", &self.until),
        ])
    }

    /// Whether any field narrows the search.
    pub fn is_filtered(&self) -> bool {
        !self.pairs().is_empty()
    }

    /// The query string (without `?`) for these fields plus `extra`.
    pub fn to_query_string(&self, extra: &[(&str, String)]) -> String {
        crate::query::query_string(self.pairs(), extra)
    }

    /// Whether `action` could change any run this search matches, judged
    /// on the filter alone: Cancel finds nothing among FAILED, CANCELED or
    /// DONE runs, nor among runs found by their error or by when they
    /// finished (only ended runs have either); Retry and Skip nothing among
    /// live or DONE runs. A status that cannot be read offers everything:
    /// the server names what is wrong when the search runs.
    pub fn may_change(&self, action: BulkAction) -> bool {
        let given = |field: &Option<String>| field.as_deref().is_some_and(|v| !v.trim().is_empty());
        // `None` when no status is asked for, or it cannot be read.
        let status = self
            .status
            .as_deref()
            .and_then(|s| RunStatus::parse(&s.trim().to_ascii_uppercase()));
        match action {
            BulkAction::Cancel => {
                !given(&self.error)
                    && !given(&self.since)
                    && !given(&self.until)
                    && status.is_none_or(|s| !s.is_terminal())
            }
            BulkAction::Retry | BulkAction::Skip => {
                status.is_none_or(|s| matches!(s, RunStatus::Failed | RunStatus::Canceled))
            }
        }
    }
}

/// One run as the search lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub id: i64,
    pub plan_id: i64,
    pub plan_name: String,
    pub task_id: i64,
    pub task_name: String,
    pub target: String,
    pub attempt: i64,
    pub status: RunStatus,
    pub replica_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// The error's first 300 characters; the run's page has all of it.
    pub error: Option<String>,
    /// Who asked to cancel the run: "canceling" while it is RUNNING.
    #[serde(default)]
    pub cancel_requested_by: Option<String>,
}

/// A page of runs, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunList {
    pub runs: Vec<RunSummary>,
    /// Pass as `before` for the next, older page; absent on the last page.
    pub next_before: Option<i64>,
}

/// An action on every run a search matches that it applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BulkAction {
    /// A new attempt of each task whose latest run FAILED or was CANCELED.
    Retry,
    /// Cancels each PENDING, AVAILABLE or RUNNING run.
    Cancel,
    /// Skips each task whose latest run FAILED or was CANCELED.
    Skip,
}

impl BulkAction {
    pub const ALL: [BulkAction; 3] = [BulkAction::Retry, BulkAction::Cancel, BulkAction::Skip];

    pub fn as_str(self) -> &'static str {
        match self {
            BulkAction::Retry => "retry",
            BulkAction::Cancel => "cancel",
            BulkAction::Skip => "skip",
        }
    }

    pub fn parse(text: &str) -> Option<BulkAction> {
        Self::ALL
            .into_iter()
            .find(|a| a.as_str().eq_ignore_ascii_case(text.trim()))
    }

    /// "Retry", for a button.
    pub fn label(self) -> &'static str {
        match self {
            BulkAction::Retry => "Retry",
            BulkAction::Cancel => "Cancel",
            BulkAction::Skip => "Skip",
        }
    }

    /// "retried", for the result line.
    pub fn past(self) -> &'static str {
        match self {
            BulkAction::Retry => "retried",
            BulkAction::Cancel => "canceled",
            BulkAction::Skip => "skipped",
        }
    }
}

/// `POST /api/v1/runs/bulk`: an action on the runs `filter` matches, bound
/// to how many the operator saw (`expected`): if the filter matches
/// another number by the time the action runs, nothing changes (409).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkRequest {
    pub action: BulkAction,
    #[serde(default)]
    pub filter: RunQuery,
    pub expected: i64,
}

/// How many runs an action on a search would change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkCounts {
    /// FAILED or CANCELED runs that are their task's latest, not skipped:
    /// what Retry and Skip change.
    pub ended_badly: i64,
    /// PENDING, AVAILABLE or RUNNING runs: what Cancel changes.
    pub live: i64,
}

impl BulkCounts {
    pub fn of(&self, action: BulkAction) -> i64 {
        match action {
            BulkAction::Retry | BulkAction::Skip => self.ended_badly,
            BulkAction::Cancel => self.live,
        }
    }
}

/// The plans list's filter as typed (`GET /api/v1/plans`, the Plans
/// page, `baton status`), for a bulk action on the runs of the plans it
/// matches. Empty means "any".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanQuery {
    /// A plan status, any case.
    pub status: Option<String>,
    /// Part of the plan's name, any case.
    pub name: Option<String>,
}

impl PlanQuery {
    /// Every field's name, as a query parameter.
    pub const PARAMS: &'static [&'static str] = &["status", "name"];

    /// The fields as `(name, value)`, empty ones left out.
    pub fn pairs(&self) -> Vec<(&'static str, &str)> {
        crate::query::filled(&[("status", &self.status), ("name", &self.name)])
    }
}

/// `POST /api/v1/plans/bulk`: an action on the runs of every plan `filter`
/// matches, bound to how many runs the operator saw (`expected`), as
/// [`BulkRequest`] is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanBulkRequest {
    pub action: BulkAction,
    #[serde(default)]
    pub filter: PlanQuery,
    pub expected: i64,
}

/// What an action on a plans filter would change: runs, and the plans
/// they belong to (the question names both; the action is bound to the
/// runs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanBulkCount {
    pub runs: i64,
    pub plans: i64,
}

/// [`PlanBulkCount`] for each kind of action, as [`BulkCounts`] for runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanBulkCounts {
    /// What Retry and Skip change.
    pub ended_badly: PlanBulkCount,
    /// What Cancel changes.
    pub live: PlanBulkCount,
}

impl PlanBulkCounts {
    pub fn of(&self, action: BulkAction) -> PlanBulkCount {
        match action {
            BulkAction::Retry | BulkAction::Skip => self.ended_badly,
            BulkAction::Cancel => self.live,
        }
    }
}

/// What a bulk action did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkResult {
    pub action: BulkAction,
    /// Runs changed: retried, canceled, or whose task was skipped.
    pub changed: i64,
}

/// Which plans the list shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlanFilter {
    pub status: Option<PlanStatus>,
    /// Part of the name, case-insensitive.
    pub name: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::{BulkAction, RunQuery};

    #[test]
    fn bulk_actions_are_offered_only_where_they_could_change_something() {
        let offered = |pairs: &[(&str, &str)]| {
            let mut query = RunQuery::default();
            for (name, value) in pairs {
                let value = Some((*value).to_owned());
                match *name {
                    "status" => query.status = value,
                    "error" => query.error = value,
                    "since" => query.since = value,
                    _ => query.target = value,
                }
            }
            BulkAction::ALL
                .into_iter()
                .filter(|a| query.may_change(*a))
                .map(BulkAction::as_str)
                .collect::<Vec<_>>()
        };
        assert_eq!(offered(&[("status", "FAILED")]), ["retry", "skip"]);
        assert_eq!(offered(&[("status", "canceled")]), ["retry", "skip"]);
        assert_eq!(offered(&[("status", "Running")]), ["cancel"]);
        assert_eq!(offered(&[("status", "PENDING")]), ["cancel"]);
        assert!(offered(&[("status", "DONE")]).is_empty());
        assert_eq!(offered(&[("error", "deadlock")]), ["retry", "skip"]);
        assert_eq!(offered(&[("since", "1h")]), ["retry", "skip"]);
        assert_eq!(offered(&[("target", "db/")]), ["retry", "cancel", "skip"]);
        assert_eq!(offered(&[("status", "")]), ["retry", "cancel", "skip"]);
        assert_eq!(
            offered(&[("status", "bogus")]),
            ["retry", "cancel", "skip"],
            "the server names the bad status"
        );
    }

    #[test]
    fn empty_fields_are_left_out_and_values_encoded() {
        let q = RunQuery {
            status: Some("FAILED".into()),
            target: Some("  ".into()),
            error: Some("dead lock&x".into()),
            ..RunQuery::default()
        };
        assert!(q.is_filtered());
        assert_eq!(
            q.to_query_string(&[("before", "42".into())]),
            "status=FAILED&error=dead%20lock%26x&before=42"
        );
        assert!(!RunQuery::default().is_filtered());
    }
}
