//! `baton bench --prune`: what retention costs the live work. A scratch
//! database gets `--seed-plans` x `--seed-tasks` finished runs of history
//! (a million by default) and replicas start on it; then single-task
//! plans are submitted one after another and each one's submit → RUNNING
//! time is taken, first with nothing else happening, then while the
//! leader's pruning (the same batches and pauses as `--retain-finished`)
//! deletes the whole history. Same build, same database, one run: the
//! two latency columns compare.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::{InProcess, Replicas, ms, percentile, pickup, render};
use crate::bench::scratch::Scratch;
use crate::bench::seed::SeedSpec;
use crate::loops::SchedulerConfig;
use crate::retention::{self, PAUSE};
use crate::store::PruneReport;
use domain::time::Ts;

/// Fewest samples per phase; the pruning phase takes more while pruning
/// lasts.
const SAMPLES: usize = 300;

pub async fn run(
    url: &str,
    replicas: usize,
    config: &SchedulerConfig,
    spec: SeedSpec,
) -> anyhow::Result<()> {
    let scratch = Scratch::new(url).await?;
    let result = bench(&scratch, replicas, config, spec).await;
    scratch.drop_database().await?;
    result
}

async fn bench(
    scratch: &Scratch,
    count: usize,
    config: &SchedulerConfig,
    spec: SeedSpec,
) -> anyhow::Result<()> {
    // Opening the stores creates and migrates the database to seed.
    let stores = scratch.stores(count).await?;
    let seeded = render::seed_with_progress(&scratch.url, spec).await?;
    // Everything seeded as finished ended before now; the probes and the
    // seed's plan in flight end later and are never candidates.
    let cutoff = Ts::now();
    // The bench drives the pruning itself, to time it.
    let config = SchedulerConfig {
        retain_finished: None,
        ..config.clone()
    };
    let replicas = Replicas::start(&stores, &config).await?;
    let backend = if scratch.url.starts_with("postgres") {
        "PostgreSQL"
    } else {
        "SQLite"
    };
    println!(
        "baton bench --prune: {backend}, {count} replicas, {} runs of history seeded in {:.1} s",
        seeded.runs, seeded.seconds
    );
    let target = InProcess(stores[0].clone());
    let result = async {
        // The seed's plan in flight (some of it halted behind failures)
        // is cancelled, so neither phase shares the replicas with it.
        stores[0]
            .plan_cancel(seeded.big_plan, "bench".into(), Ts::now())
            .await?;
        let quiet = samples(&target, SAMPLES, || false).await?;
        let pruner = stores[0].clone();
        let stop = CancellationToken::new();
        let pruning = tokio::spawn({
            let stop = stop.clone();
            async move {
                let started = Instant::now();
                let report = retention::prune(pruner.as_ref(), cutoff, PAUSE, &stop, |_| {}).await;
                report.map(|r| (r, started.elapsed()))
            }
        });
        let busy = samples(&target, SAMPLES, || !pruning.is_finished()).await?;
        let (report, took) = pruning.await??;
        print_latency("no pruning", &quiet);
        print_latency("while pruning", &busy);
        print_pruned(&report, took);
        let left = stores[0].plan_prune_scan(cutoff, None, 10).await?;
        anyhow::ensure!(
            left.prunable.is_empty(),
            "plans that may be pruned are left"
        );
        Ok(())
    }
    .await;
    replicas.stop().await;
    result
}

/// Submits one single-task plan at a time and returns the sorted submit →
/// RUNNING times: at least `at_least`, and on while `more` says so.
async fn samples(
    target: &InProcess,
    at_least: usize,
    more: impl Fn() -> bool,
) -> anyhow::Result<Vec<Duration>> {
    let mut latencies = Vec::new();
    while latencies.len() < at_least || more() {
        let name = format!("bench-probe-{}", latencies.len());
        latencies.push(pickup(target, &name, "bench/probe").await?);
    }
    latencies.sort();
    Ok(latencies)
}

fn print_latency(phase: &str, sorted: &[Duration]) {
    println!(
        "submit -> RUNNING, {phase}, {} samples: p50 {} p95 {} p99 {} max {}",
        sorted.len(),
        ms(percentile(sorted, 50.0)),
        ms(percentile(sorted, 95.0)),
        ms(percentile(sorted, 99.0)),
        ms(*sorted.last().expect("samples > 0"))
    );
}

fn print_pruned(r: &PruneReport, took: Duration) {
    println!(
        "pruned {} plans, {} runs, {} events in {:.1} s -> {:.0} runs/s deleted",
        r.plans,
        r.runs,
        r.events,
        took.as_secs_f64(),
        r.runs as f64 / took.as_secs_f64()
    );
}
