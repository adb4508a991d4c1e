//! An operator's hand during a freeze (docs/design.md, "Operator
//! actions"): a replica is frozen (SIGSTOP) and, through another replica,
//! its RUNNING tasks are canceled. The frozen owner cannot confirm the
//! kill, so each run must stay RUNNING, holding its target (a Skip of it
//! is refused), until the sweeper finds the owner stale and ends it
//! CANCELED, never retried; meanwhile the supervisor has killed the
//! command, which the history's process checks see. Once it is over the
//! operator Retries or Skips the task, so its plan can end.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::Value;

use crate::common::eventually;
use crate::common::process::Baton;

/// What the operator did, for the history's checks and the report.
#[derive(Default)]
pub struct Operator {
    /// Runs canceled while their replica was frozen.
    pub canceled: usize,
    /// Skips refused because the task was still being canceled.
    pub refused_skips: usize,
    /// Tasks skipped afterwards: they end SKIPPED, not DONE or FAILED.
    pub skipped: HashSet<i64>,
    pub retried: usize,
}

/// Freezes `frozen` for `outage`, canceling up to two of its RUNNING
/// tasks through `other` meanwhile, then resolves them.
pub async fn cancel_while_frozen(
    rng: &mut fastrand::Rng,
    frozen: &Baton,
    other: &Baton,
    outage: Duration,
    operator: &mut Operator,
) {
    let (_, found) = other
        .get_json(&format!(
            "/api/v1/runs?status=RUNNING&replica={}",
            frozen.replica_id
        ))
        .await;
    let runs: Vec<(i64, i64)> = found["runs"]
        .as_array()
        .map(|runs| {
            runs.iter()
                .filter_map(|r| Some((r["id"].as_i64()?, r["task_id"].as_i64()?)))
                .take(2)
                .collect()
        })
        .unwrap_or_default();
    frozen.sigstop();
    let mut asked = Vec::new();
    for (run, task) in runs {
        let (status, _) = other
            .post_json(&format!("/api/v1/tasks/{task}/cancel"), None)
            .await;
        // It may have ended just before the freeze.
        if !status.is_success() {
            continue;
        }
        let (status, body) = other
            .post_json(&format!("/api/v1/tasks/{task}/skip"), None)
            .await;
        assert_eq!(
            status.as_u16(),
            409,
            "a Skip of task {task} while its run {run} is being canceled: {body}"
        );
        operator.refused_skips += 1;
        asked.push((run, task));
    }
    tokio::time::sleep(outage).await;
    frozen.sigcont();
    for (run, task) in asked {
        let ended = eventually(
            Duration::from_secs(20),
            &format!("canceled run {run} ended"),
            || async {
                let (_, view) = other.get_json(&format!("/api/v1/runs/{run}")).await;
                (view["status"].as_str()? != "RUNNING").then_some(view)
            },
        )
        .await;
        // The owner was frozen before the cancel: only the sweeper could
        // end the run, and it ends a canceled run CANCELED.
        assert_eq!(
            ended["status"], "CANCELED",
            "run {run}, canceled while its replica {} was frozen: {ended}",
            frozen.replica_id
        );
        operator.canceled += 1;
        resolve(rng, other, &ended, task, operator).await;
    }
}

/// Retries or Skips the canceled task. Never retried automatically: its
/// latest run is still the canceled one.
async fn resolve(
    rng: &mut fastrand::Rng,
    other: &Baton,
    run: &Value,
    task: i64,
    operator: &mut Operator,
) {
    let plan = run["plan_id"].as_i64().unwrap();
    let (_, view) = other.get_json(&format!("/api/v1/plans/{plan}")).await;
    let latest = view["tasks"]
        .as_array()
        .and_then(|tasks| tasks.iter().find(|t| t["id"].as_i64() == Some(task)))
        .map(|t| t["run_id"].clone());
    assert_eq!(
        latest,
        Some(run["id"].clone()),
        "a canceled run was retried: plan {view}"
    );
    // A Retry after the plan notified would open a second phase: skip then.
    let skip = rng.bool() || !view["notification"].is_null();
    let action = if skip { "skip" } else { "retry" };
    let (status, body) = other
        .post_json(&format!("/api/v1/tasks/{task}/{action}"), None)
        .await;
    assert!(
        status.is_success(),
        "{action} of canceled task {task}: {status} {body}"
    );
    if skip {
        operator.skipped.insert(task);
    } else {
        operator.retried += 1;
    }
}
