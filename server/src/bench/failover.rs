//! `baton bench --failover`: how long a dead replica's runs stay RUNNING.
//!
//! Starts `--failover-replicas` real `baton serve` processes (this very
//! binary) on a scratch PostgreSQL database, gives them long runs, then in
//! each round SIGKILLs the replica holding the most runs and times, from
//! the kill, until the sweeper has resolved every one of them. The bound to
//! compare with is `stale_after + sweep_interval` plus scheduling slack
//! (docs/design.md, "Invariants", invariant 6) — or, when the victim was
//! the leader, the lease (`BATON_LEADER_LEASE`) running out first if it is
//! the longer of the two. Heartbeat, sweep and lease settings are the
//! global flags / `BATON_*` variables, passed on to the processes.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use domain::model::RunStatus;

use super::serve_process::ServeProcess;
use crate::bench::scratch::Scratch;
use crate::config::Settings;
use crate::store::{LEADER_LEASE, Store, StoreError};
use domain::time::Ts;

/// How often the bench looks at the runs it is waiting for.
const POLL: Duration = Duration::from_millis(20);

struct Process {
    serve: ServeProcess,
    replica_id: String,
}

pub async fn run(
    settings: &Settings,
    replicas: usize,
    rounds: usize,
    runs: usize,
) -> anyhow::Result<()> {
    let url = &settings.database.url.0;
    if !url.starts_with("postgres") {
        bail!(
            "--failover needs several processes on one database: set BATON_DATABASE_URL to a postgres:// URL"
        );
    }
    anyhow::ensure!(replicas >= 2, "--failover-replicas must be at least 2");
    anyhow::ensure!(
        rounds >= 1 && runs >= 1,
        "--rounds and --failover-runs must be at least 1"
    );
    let scratch = Scratch::postgres(url).await?;
    let result = measure(settings, &scratch, replicas, rounds, runs).await;
    scratch.drop_database().await?;
    result
}

async fn measure(
    settings: &Settings,
    scratch: &Scratch,
    replicas: usize,
    rounds: usize,
    runs: usize,
) -> anyhow::Result<()> {
    let store = scratch.store().await?;
    let mut processes = Vec::new();
    for _ in 0..replicas {
        processes.push(spawn(settings, &scratch.url, store.as_ref(), runs).await?);
    }
    let bound = settings.stale_after + settings.sweep_interval;
    println!(
        "baton bench --failover: {replicas} processes on PostgreSQL, heartbeat {}, stale after {}, sweep every {} (bound {})",
        humantime::format_duration(settings.heartbeat_interval),
        humantime::format_duration(settings.stale_after),
        humantime::format_duration(settings.sweep_interval),
        humantime::format_duration(bound),
    );
    let mut times = Vec::new();
    for round in 1..=rounds {
        let tasks: Vec<_> = (0..runs * replicas)
            .map(|i| serde_json::json!({"name": format!("t{i}"), "target": format!("t{i}"), "exclusive": false, "sleep": "1h"}))
            .collect();
        let plan = crate::plan::parse_json(
            serde_json::json!({"name": format!("failover-{round}"), "tasks": tasks})
                .to_string()
                .as_bytes(),
        )?;
        let plan_id = store.plan_insert(&plan, "bench".into(), Ts::now()).await?;
        let run_ids = wait_all_running(store.as_ref(), plan_id).await?;
        // The victim: whoever holds the most of this round's runs.
        let mut held: Vec<(String, Vec<i64>)> = Vec::new();
        for id in &run_ids {
            let run = store.run_get(*id).await?;
            let owner = run.replica_id.unwrap_or_default();
            match held.iter_mut().find(|(r, _)| *r == owner) {
                Some((_, ids)) => ids.push(*id),
                None => held.push((owner, vec![*id])),
            }
        }
        held.sort_by_key(|(_, ids)| std::cmp::Reverse(ids.len()));
        let (victim, victim_runs) = held.swap_remove(0);
        let at = processes
            .iter()
            .position(|p| p.replica_id == victim)
            .context("the runs' replica is not one of ours")?;
        let leader = store
            .lease_get(LEADER_LEASE)
            .await?
            .is_some_and(|lease| lease.holder == victim);
        let dead = processes.swap_remove(at);
        let killed = Instant::now();
        dead.serve.kill().await?;
        let mut open = victim_runs.clone();
        while !open.is_empty() {
            tokio::time::sleep(POLL).await;
            let mut still = Vec::new();
            for id in open {
                if store.run_get(id).await?.status == RunStatus::Running {
                    still.push(id);
                }
            }
            open = still;
            if killed.elapsed() > bound * 10 {
                bail!(
                    "runs of the killed replica still RUNNING after {:?}",
                    killed.elapsed()
                );
            }
        }
        let took = killed.elapsed();
        times.push(took);
        println!(
            "round {round}: killed {victim}{} holding {} runs; all resolved {:.2} s after the kill",
            if leader {
                " (the leader: its successor takes the lease first)"
            } else {
                ""
            },
            victim_runs.len(),
            took.as_secs_f64()
        );
        // The survivors' runs are not needed any more (a plan whose runs all
        // sat on the victim has nothing left to cancel).
        match store.plan_cancel(plan_id, "bench".into(), Ts::now()).await {
            Ok(()) | Err(StoreError::Conflict(_)) => {}
            Err(e) => return Err(e.into()),
        }
        processes.push(spawn(settings, &scratch.url, store.as_ref(), runs).await?);
    }
    times.sort();
    let p50 = times[times.len() / 2];
    let max = *times.last().expect("at least one round");
    println!(
        "detection: p50 {:.2} s, max {:.2} s over {rounds} rounds (stale_after + sweep_interval = {:.2} s)",
        p50.as_secs_f64(),
        max.as_secs_f64(),
        bound.as_secs_f64()
    );
    for p in processes {
        p.serve.kill().await?;
    }
    Ok(())
}

/// Starts one `baton serve` with `workers` slots (so runs spread over the
/// processes) and waits for its heartbeat row.
async fn spawn(
    settings: &Settings,
    url: &str,
    store: &dyn Store,
    workers: usize,
) -> anyhow::Result<Process> {
    let serve = ServeProcess::spawn(settings, url, workers)?;
    let replica_id = serve.registered(store).await?;
    Ok(Process { serve, replica_id })
}

/// The plan's run ids once every one is RUNNING.
async fn wait_all_running(store: &dyn Store, plan_id: i64) -> anyhow::Result<Vec<i64>> {
    let started = Instant::now();
    loop {
        let view = store.plan_get(plan_id).await?;
        if view
            .tasks
            .iter()
            .all(|t| t.status == domain::model::TaskStatus::Running)
        {
            return Ok(view.tasks.iter().filter_map(|t| t.run_id).collect());
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("the round's runs did not all start within 60 s");
        }
        tokio::time::sleep(POLL).await;
    }
}
