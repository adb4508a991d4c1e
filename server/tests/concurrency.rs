//! SPEC §10 invariants 1–3 under real concurrency, on both backends: eight
//! replicas (each its own pool and id, all loops running) work through 600
//! short runs over 24 targets with versions, exclusive and shared tasks and
//! plan limits; the event history must show no overlap on an exclusive
//! target, no plan above its limit, versions in order, and every run
//! executed exactly once.

mod common;

use std::time::Duration;

use app::model::{PlanStatus, PlanView};
use baton::executor::Registry;
use baton::scheduler::{Replica, SchedulerConfig};
use baton::store::{ReplicaInfo, Ts};
use common::{Kind, TestDb, eventually, invariants, plan};
use serde_json::json;
use tokio_util::sync::CancellationToken;

per_backend!(cases: eight_replicas_keep_every_invariant);

const PLANS: usize = 12;
const TASKS_PER_PLAN: usize = 50;
const TARGETS: usize = 24;

mod cases {
    use super::*;

    pub async fn eight_replicas_keep_every_invariant(kind: Kind) {
        let db = TestDb::new(kind).await;
        let shutdown = CancellationToken::new();
        let config = SchedulerConfig {
            workers: 6,
            poll_interval: Duration::from_millis(20),
            heartbeat_interval: Duration::from_millis(500),
            stale_after: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(5),
            ..SchedulerConfig::default()
        };
        let mut replicas = Vec::new();
        for i in 0..8 {
            let info = ReplicaInfo {
                replica_id: format!("r-conc-{i}"),
                hostname: "test".into(),
                labels: Vec::new(),
                version: "test".into(),
                started_at: Ts::now(),
            };
            let store = db.store().await;
            replicas.push(
                Replica::start(
                    store,
                    info,
                    config.clone(),
                    Registry::builtin(),
                    shutdown.clone(),
                )
                .await
                .unwrap(),
            );
        }
        let submitter = db.store().await;
        let mut ids = Vec::new();
        for p in 0..PLANS {
            let tasks: Vec<_> = (0..TASKS_PER_PLAN)
                .map(|t| {
                    let n = p * TASKS_PER_PLAN + t;
                    let mut task = json!({
                        "name": format!("t{t}"),
                        "target": format!("db/{}", n % TARGETS),
                        // Two in three exclusive, the rest shared.
                        "exclusive": !n.is_multiple_of(3),
                        "sleep": if n.is_multiple_of(5) { "3ms" } else { "0s" },
                    });
                    // Every fourth task carries a version, deliberately out
                    // of submission order across plans.
                    if n.is_multiple_of(4) {
                        task["version"] = json!(format!("{}.{}", (PLANS - p) % 4, t));
                    }
                    task
                })
                .collect();
            let limit = if p % 2 == 0 {
                json!(2 + p % 3)
            } else {
                json!(null)
            };
            let mut file = json!({"name": format!("plan-{p}"), "tasks": tasks});
            if !limit.is_null() {
                file["parallel_limit"] = limit;
            }
            ids.push(
                submitter
                    .plan_insert(&plan(file), "test", Ts::now())
                    .await
                    .unwrap(),
            );
        }
        let views: Vec<PlanView> = eventually(Duration::from_secs(120), "every plan DONE", || {
            let submitter = submitter.clone();
            let ids = ids.clone();
            async move {
                let mut views = Vec::new();
                for id in ids {
                    let view = submitter.plan_get(id).await.ok()?;
                    if view.status != PlanStatus::Done {
                        return None;
                    }
                    views.push(view);
                }
                Some(views)
            }
        })
        .await;
        shutdown.cancel();
        for r in replicas {
            r.join().await.expect("no loop panicked");
        }
        let events = invariants::all_events(submitter.as_ref()).await;
        invariants::check(&views, &events);
        db.assert_open_task_counts().await;
        let runs = views.iter().map(|v| v.tasks.len()).sum::<usize>();
        assert_eq!(runs, PLANS * TASKS_PER_PLAN);
        let replicas_used: std::collections::HashSet<_> = views
            .iter()
            .flat_map(|v| v.tasks.iter().filter_map(|t| t.replica_id.clone()))
            .collect();
        assert!(
            replicas_used.len() >= 4,
            "work spread over replicas: {replicas_used:?}"
        );
    }
}
