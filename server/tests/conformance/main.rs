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

mod admission;
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

/// A task pinned to node `gpu` (`reassign_after: 1m`) whose run replica
/// `r-gpu` (which must have its row) claimed at `at` and handed back: the
/// run is AVAILABLE and still pinned. Returns the plan's id and the run's.
async fn pinned_run_handed_back(s: &dyn Store, at: Ts) -> (i64, i64) {
    let id = submit(
        s,
        serde_json::json!({"name": "p", "tasks": [
            {"name": "gpu", "target": "a", "sleep": "0s", "node": "gpu", "reassign_after": "1m"},
        ]}),
    )
    .await;
    let mut nodes = domain::gates::NodeLabels::default();
    nodes.live.insert("gpu".into());
    let promoted = s.run_promote_round(&nodes, None, at).await.unwrap();
    assert_eq!(promoted.promoted, 1);
    let labels = vec!["gpu".to_owned()];
    let claimed = s
        .run_claim_many(&common::store::claim("r-gpu", &labels, 5), at)
        .await
        .unwrap();
    let run = claimed[0].id;
    let back = s
        .run_hand_back_many("r-gpu", &[run], "handed back at shutdown", at)
        .await
        .unwrap();
    assert_eq!(back, vec![run]);
    (id, run)
}

/// `n` in-process replicas (`r-{prefix}-0`, …) on `db`, each working
/// with `workers` slots and fast loops (polls of 20 ms), until `shutdown`.
async fn fleet(
    db: &common::TestDb,
    prefix: &str,
    n: usize,
    workers: usize,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Vec<baton::loops::Replica> {
    let config = baton::loops::SchedulerConfig {
        workers,
        poll_interval: Duration::from_millis(20),
        heartbeat_interval: Duration::from_millis(500),
        stale_after: Duration::from_secs(10),
        shutdown_grace: Duration::from_secs(5),
        ..baton::loops::SchedulerConfig::default()
    };
    let mut replicas = Vec::with_capacity(n);
    for i in 0..n {
        let info = baton::store::ReplicaInfo {
            replica_id: format!("r-{prefix}-{i}"),
            hostname: "test".into(),
            labels: Vec::new(),
            version: "test".into(),
            started_at: Ts::now(),
        };
        let replica = baton::loops::Replica::start(
            db.store().await,
            info,
            config.clone(),
            baton::executor::Registry::builtin(),
            shutdown.clone(),
        )
        .await
        .unwrap();
        replicas.push(replica);
    }
    replicas
}

/// Waits up to `within` for every plan of `ids` to be DONE, then stops
/// `fleet` (no loop may have panicked); the plans as they ended.
async fn all_done_then_stop(
    s: &std::sync::Arc<dyn Store>,
    ids: &[i64],
    within: Duration,
    fleet: Vec<baton::loops::Replica>,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Vec<domain::model::PlanView> {
    let views = common::eventually(within, "every plan DONE", || {
        let s = s.clone();
        let ids = ids.to_vec();
        async move {
            let mut views = Vec::new();
            for id in ids {
                let view = s.plan_get(id).await.ok()?;
                if view.status != domain::model::PlanStatus::Done {
                    return None;
                }
                views.push(view);
            }
            Some(views)
        }
    })
    .await;
    shutdown.cancel();
    for r in fleet {
        r.join().await.expect("no loop panicked");
    }
    views
}
