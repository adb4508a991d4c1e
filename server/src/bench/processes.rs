//! `baton bench --processes N`: the throughput phases worked by N real
//! `baton serve` processes instead of in-process replicas (PostgreSQL).
//!
//! Two phases, each on a scratch database of its own:
//! - **End to end.** The processes start and register, one of them
//!   takes the leader's lease, then this bench submits the plans one
//!   after the other while they work, as one client would. The figure
//!   runs from the first plan's `created_at` to the last run's
//!   `finished_at`.
//! - **Full queue.** Every run is submitted (PENDING) first; then the
//!   processes start, and the figure runs from the start of the first
//!   promotion round (the first AVAILABLE event's time, which is its
//!   round's) to the last run's `finished_at`: the whole work on the
//!   queue is inside, the processes' own start-up (connecting, checking
//!   migrations, choosing a leader) is not.
//!
//! Each process has `--bench-workers` slots. CPU is sampled every 50 ms
//! through a phase and counted over that same window, from the sample
//! before it to the one after: the machine's per run, and PostgreSQL's
//! processes' and the replicas' in cores; with the database near the
//! machine's core count, more replicas cannot go faster. With several
//! processes, each phase then prints how many runs each one ran, the
//! leader's first.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::cpu_window::{Meters, Sample, cores};
use super::serve_process::{self, ServeProcess};
use super::{BenchArgs, InProcess, cpu_per_run, ms, submit_all, throughput_plans};
use crate::bench::scratch::Scratch;
use crate::config::Settings;
use crate::store::{LEADER_LEASE, Store};
use domain::time::Ts;

pub async fn run(settings: &Settings, args: &BenchArgs, processes: usize) -> anyhow::Result<()> {
    let url = &settings.database.url.0;
    if !url.starts_with("postgres") {
        bail!(
            "--processes needs several processes on one database: set BATON_DATABASE_URL to a postgres:// URL"
        );
    }
    anyhow::ensure!(
        (1..=64).contains(&processes),
        "--processes must be between 1 and 64"
    );
    println!(
        "baton bench: PostgreSQL, {processes} baton serve process{} x {} workers, poll {:?}",
        plural(processes),
        args.bench_workers,
        settings.poll_interval
    );
    for phase in [Phase::EndToEnd, Phase::FullQueue] {
        let scratch = Scratch::postgres(url).await?;
        let result = measure(settings, &scratch, args, processes, phase).await;
        scratch.drop_database().await?;
        result?;
    }
    Ok(())
}

/// Whether the runs are submitted while the processes work or before
/// they start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    EndToEnd,
    FullQueue,
}

fn plural(count: usize) -> &'static str {
    if count == 1 { "" } else { "es" }
}

async fn measure(
    settings: &Settings,
    scratch: &Scratch,
    args: &BenchArgs,
    count: usize,
    phase: Phase,
) -> anyhow::Result<()> {
    let store = scratch.store().await?;
    scratch.drop_indexes(&args.drop_index).await?;
    let target = InProcess(store.clone());
    let plans = throughput_plans(args);
    let total = args.throughput_runs();
    let plural = plural(count);
    let queued = match phase {
        Phase::EndToEnd => None,
        Phase::FullQueue => {
            let submitting = Instant::now();
            let ids = submit_all(&target, &plans).await?;
            println!(
                "full queue: {total} runs submitted in {} with no replica running",
                ms(submitting.elapsed())
            );
            Some(ids)
        }
    };

    // Its first sample before the spawn, so that one comes before the
    // first round or claim however fast that is.
    let meters = Meters::new();
    let spawned_at = Ts::now();
    let mut processes = Vec::with_capacity(count);
    for _ in 0..count {
        processes.push(ServeProcess::spawn(
            settings,
            &scratch.url,
            args.bench_workers,
        )?);
    }
    let sampler = meters.start(processes.iter().filter_map(ServeProcess::pid));
    let result = async {
        // `submitted`: how long the end-to-end phase's submits took; None
        // for the full queue, submitted before the spawn.
        let (ids, submitted) = match queued {
            Some(ids) => (ids, None),
            None => {
                let labels: Vec<String> =
                    processes.iter().map(|p| p.label().to_owned()).collect();
                tokio::select! {
                    ready = all_ready(&labels, store.as_ref()) => ready?,
                    exited = first_exit(&mut processes) => return Err(exited),
                }
                let submitting = Instant::now();
                let ids = submit_all(&target, &plans).await?;
                (ids, Some(submitting.elapsed()))
            }
        };
        tokio::select! {
            done = super::wait_all_done(&target, &ids) => done?,
            exited = first_exit(&mut processes) => return Err(exited),
        }
        let samples = sampler.stop();
        let (created, last) = super::span(&target, &ids).await?;
        let first = match submitted {
            Some(_) => created,
            None => first_work(&scratch.url, spawned_at).await?,
        };
        let took = (last.0 - first.0).to_std().unwrap_or_default();
        // Unknown (no /proc, or samples not around the window): no CPU
        // per run and "-" for each core count.
        let cpu = Sample::over(&samples, first, last);
        let window = cpu.map_or(Duration::ZERO, |(_, window)| window);
        let used = |of: fn(&Sample) -> Option<Duration>| cpu.as_ref().and_then(|(s, _)| of(s));
        let what = match submitted {
            Some(submitted) => format!(
                "end to end, {count} process{plural}: {total} runs submitted in {} while the processes ran, first submit to last finish {}",
                ms(submitted),
                ms(took)
            ),
            None => format!(
                "full queue, {count} process{plural}: {total} runs submitted before the processes started, first round or claim to last finish {} ({} after the spawn)",
                ms(took),
                ms((first.0 - spawned_at.0).to_std().unwrap_or_default())
            ),
        };
        println!(
            "{what} -> {:.0} runs/s{}; cores busy: PostgreSQL {}, replicas {}, this bench {}",
            total as f64 / took.as_secs_f64(),
            cpu_per_run(used(|s| s.machine), total),
            cores(used(|s| s.postgres), window),
            cores(used(|s| s.replicas), window),
            cores(used(|s| s.bench), window),
        );
        if count > 1 {
            println!("  {}", shares(&scratch.url, store.as_ref()).await?);
        }
        Ok(())
    }
    .await;
    for p in processes {
        p.kill().await?;
    }
    result
}

/// Waits until every process (by its label) has registered and one of
/// them holds the leader's lease (it runs the promotion rounds), so that
/// the end-to-end phase's first submit finds a replica set at work, as a
/// server's would.
async fn all_ready(labels: &[String], store: &dyn Store) -> anyhow::Result<()> {
    let mut ids = Vec::with_capacity(labels.len());
    for label in labels {
        ids.push(serve_process::registered(store, label).await?);
    }
    let started = Instant::now();
    loop {
        if let Some(lease) = store.lease_get(LEADER_LEASE).await?
            && ids.contains(&lease.holder)
        {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(30) {
            bail!("no baton serve process took the leader's lease within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until one of `processes` exits, which none should before the
/// bench kills them: a replica that could not start (or died) would
/// otherwise leave the bench waiting out its 10 minutes.
async fn first_exit(processes: &mut [ServeProcess]) -> anyhow::Error {
    loop {
        for p in processes.iter_mut() {
            match p.child.try_wait() {
                Ok(Some(status)) => {
                    return anyhow::anyhow!(
                        "a baton serve process exited ({status}) before the queue was done"
                    );
                }
                Ok(None) => {}
                Err(e) => return e.into(),
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// When the processes set to work on the queue: the first promotion
/// round after `spawned_at` (its runs' promotions, stamps or event rows,
/// carry the time the round took at its start) or the first claim,
/// whichever came first. A plan admitted at its submit was AVAILABLE
/// before the spawn, so its first claim is where its work starts.
async fn first_work(url: &str, spawned_at: Ts) -> anyhow::Result<Ts> {
    use sqlx::Connection;
    let mut db = sqlx::PgConnection::connect(url).await?;
    let first: Option<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
        "SELECT MIN(at) FROM (
            SELECT MIN(available_at) AS at FROM task_run WHERE available_at >= $1
            UNION ALL SELECT MIN(at) FROM run_event WHERE to_status = 'AVAILABLE' AND at >= $1
            UNION ALL SELECT MIN(started_at) FROM task_run) worked",
    )
    .bind(spawned_at)
    .fetch_one(&mut db)
    .await?;
    first.map(Ts).context("no run was promoted or claimed")
}

/// How the runs were shared out: how many each process ran, the
/// leader's first. The leader's promotion rounds claim for its own free
/// slots before the others hear of the runs (`engine::gates::promote`), so its
/// share shows how much that tilts the work.
async fn shares(url: &str, store: &dyn Store) -> anyhow::Result<String> {
    use sqlx::Connection;
    let mut db = sqlx::PgConnection::connect(url).await?;
    let ran: Vec<(String, i64)> = sqlx::query_as(
        "SELECT replica_id, COUNT(*) FROM task_run WHERE replica_id IS NOT NULL
         GROUP BY replica_id ORDER BY COUNT(*) DESC, replica_id",
    )
    .fetch_all(&mut db)
    .await?;
    let leader = store.lease_get(LEADER_LEASE).await?.map(|l| l.holder);
    let (led, others): (Vec<_>, Vec<_>) = ran
        .iter()
        .partition(|(replica, _)| Some(replica) == leader.as_ref());
    let counts = |runs: Vec<&(String, i64)>| match runs.is_empty() {
        true => "none".to_owned(),
        false => runs
            .iter()
            .map(|(_, n)| n.to_string())
            .collect::<Vec<_>>()
            .join(", "),
    };
    Ok(format!(
        "runs per process: the leader {}; the others {}",
        counts(led),
        counts(others)
    ))
}
