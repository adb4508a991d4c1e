//! Small builders and steps the store suites share.

use std::time::Duration;

use baton::store::{Claim, Finish, ReplicaInfo, Store};
use domain::gates::NodeLabels;
use domain::model::RunStatus;
use domain::time::Ts;

pub fn replica(id: &str, labels: &[&str]) -> ReplicaInfo {
    ReplicaInfo {
        replica_id: id.into(),
        hostname: "test".into(),
        labels: labels.iter().map(|l| l.to_string()).collect(),
        version: "test".into(),
        started_at: Ts::now(),
    }
}

pub fn claim<'a>(replica_id: &'a str, labels: &'a [String], limit: i64) -> Claim<'a> {
    Claim {
        replica_id,
        labels,
        limit,
        heartbeat_timeout: Duration::from_secs(10),
    }
}

pub fn done(run_id: i64) -> Finish {
    Finish {
        run_id,
        status: RunStatus::Done,
        result_code: Some(0),
        error: None,
    }
}

pub fn failed(run_id: i64) -> Finish {
    Finish {
        run_id,
        status: RunStatus::Failed,
        result_code: Some(3),
        error: Some("exited with code 3".into()),
    }
}

pub async fn promote(store: &dyn Store) -> baton::store::PromoteReport {
    store
        .run_promote_round(&NodeLabels::default(), None, Ts::now())
        .await
        .expect("promote")
}

/// Runs one promotion round and claims everything AVAILABLE as `r-test`.
pub async fn promote_and_claim(store: &dyn Store) -> Vec<i64> {
    promote(store).await;
    let claimed = store
        .run_claim_many(&claim("r-test", &[], 1000), Ts::now())
        .await
        .expect("claim");
    claimed.iter().map(|c| c.id).collect()
}

pub fn task_named<'a>(
    view: &'a domain::model::PlanView,
    name: &str,
) -> &'a domain::model::TaskView {
    view.tasks.iter().find(|t| t.name == name).expect("task")
}

/// `n` no-op tasks `t0`, `t1`, ..., each on a target of its own (`x0`,
/// `x1`, ...), so no gate but the ones a test adds holds any of them back.
pub fn noop_tasks(n: usize) -> Vec<serde_json::Value> {
    (0..n)
        .map(|i| serde_json::json!({"name": format!("t{i}"), "target": format!("x{i}"), "sleep": "0s"}))
        .collect()
}

/// Waits (up to 30 s) until plan `id` is DONE.
pub async fn plan_done(store: &dyn Store, id: i64) {
    crate::common::eventually(Duration::from_secs(30), "the plan DONE", || async move {
        (store.plan_get(id).await.unwrap().status == domain::model::PlanStatus::Done).then_some(())
    })
    .await;
}
