//! The store conformance suite: every store operation, run once against
//! SQLite and once against PostgreSQL (`<concern>::sqlite::*`,
//! `<concern>::postgres::*`). This is what proves the two backends behave
//! the same. One test binary, one module per concern:
//!
//! - `plans`: submit, the plan list and a plan's view, the operator's
//!   actions (start, cancel, retry, skip), not-found answers;
//! - `cancel`: a cancel of a RUNNING run holds its target until its
//!   replica confirms the kill or is found stale;
//! - `gates`: exclusive and shared targets, versions, plan limits, `run_at`,
//!   node pins and losing them, as promotion rounds apply them;
//! - `claim_finish`: claims and labels, fenced finishes, automatic retries
//!   with backoff, logs;
//! - `liveness`: the leader lease, the sweeper, hand-back, replicas, run
//!   heartbeats;
//! - `notifications`: notification claims, the outbox, deliveries;
//! - `dashboard`: the reads behind the dashboard;
//! - `bulk`: bulk Retry, Cancel and Skip on a runs search, bound to the
//!   count the operator saw, and operators racing one; `plan_bulk`: the
//!   same on the plans a status and name filter matches;
//! - `audit`: the audit log: one entry per person's action, refusals,
//!   sign-ins, filters and pages, retention, rollback;
//! - `retention`: pruning finished plans, whole and with nothing left
//!   behind, never an open or recently changed one;
//! - `history`: a scripted scenario's whole history reads exactly as it
//!   did before the ordinary path became stamps on the run's row;
//! - `run_search`: the runs search, every filter against a plain reading
//!   of the history, paged, on both sides of the probe's reach;
//! - `sessions`: sign-in sessions;
//! - `workflow`: halt on failure, dependencies and stages, approvals,
//!   pausing plans and targets, target capacity;
//! - `schedules`: exactly one plan per due tick with rounds racing,
//!   catch-up and overlap policies, daylight-saving days, the operator's
//!   actions on a schedule;
//! - `concurrency`: many claimers, promoters and retries at once, and eight
//!   in-process replicas keeping invariants 1–3 (docs/design.md).

#[path = "../common/mod.rs"]
mod common;

mod audit;
mod bulk;
mod cancel;
mod claim_finish;
mod concurrency;
mod dashboard;
mod export;
mod gates;
mod halted;
mod history;
mod liveness;
mod notifications;
mod plan_bulk;
mod plans;
mod retention;
mod run_search;
mod schedules;
mod sessions;
mod workflow;

use std::time::Duration;

use baton::store::Store;
use common::plan;
use domain::time::Ts;

const SECOND: Duration = Duration::from_secs(1);

/// A plan newer than every other, holding the highest plan, task and run
/// ids, which retention keeps (ids must only grow): submitted last, it
/// lets a test prune the plans before it. Its run waits for a start time
/// far away, so nothing claims it.
async fn newest_plan(s: &dyn Store) -> i64 {
    submit(
        s,
        serde_json::json!({"name": "newest", "tasks": [{"name": "a", "target": "newest",
            "run_at": "2999-01-01T00:00:00Z", "sleep": "0s"}]}),
    )
    .await
}

/// Submits one plan and returns its id.
async fn submit(s: &dyn Store, json: serde_json::Value) -> i64 {
    s.plan_insert(&plan(json), "t".into(), Ts::now())
        .await
        .unwrap()
}
