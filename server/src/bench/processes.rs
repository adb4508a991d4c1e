//! `baton bench --processes N`: the full-queue phase burned down by N real
//! `baton serve` processes instead of in-process replicas (PostgreSQL).
//!
//! Every run is submitted (PENDING) first; then the processes start,
//! each with `--bench-workers` slots, and the figure runs from the start
//! of the first promotion round (the first AVAILABLE event's time, which
//! is its round's) to the last run's `finished_at`: the whole work on the
//! queue is inside, the processes' own start-up (connecting, checking
//! migrations, choosing a leader) is not. CPU is
//! sampled every 50 ms through the phase and counted over that same
//! window, from the sample before it to the one after: the machine's per
//! run, and PostgreSQL's processes' and the replicas' in cores; with the
//! database near the machine's core count, more replicas cannot go faster.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::cpu_meter::{CpuMeter, ProcessCpu};
use super::serve_process::ServeProcess;
use super::{BenchArgs, InProcess, cpu_per_run, ms, submit_all, throughput_plans};
use crate::config::Settings;
use crate::store::Ts;
use crate::store::scratch::Scratch;

pub async fn run(settings: &Settings, args: &BenchArgs, processes: usize) -> anyhow::Result<()> {
    let url = &settings.database_url.0;
    if !url.starts_with("postgres") {
        bail!(
            "--processes needs several processes on one database: set BATON_DATABASE_URL to a postgres:// URL"
        );
    }
    anyhow::ensure!(
        (1..=64).contains(&processes),
        "--processes must be between 1 and 64"
    );
    let scratch = Scratch::postgres(url).await?;
    let result = measure(settings, &scratch, args, processes).await;
    scratch.drop_database().await?;
    result
}

async fn measure(
    settings: &Settings,
    scratch: &Scratch,
    args: &BenchArgs,
    count: usize,
) -> anyhow::Result<()> {
    let store = scratch.store().await?;
    scratch.drop_indexes(&args.drop_index).await?;
    let target = InProcess(store.clone());
    let total = args.throughput_runs();
    let plural = if count == 1 { "" } else { "es" };
    println!(
        "baton bench: PostgreSQL, {count} baton serve process{plural} x {} workers, poll {:?}",
        args.bench_workers, settings.poll_interval
    );
    let submitting = Instant::now();
    let ids = submit_all(&target, &throughput_plans(args)).await?;
    println!(
        "full queue: {total} runs submitted in {} with no replica running",
        ms(submitting.elapsed())
    );

    // Its first sample before the spawn, so that one comes before the
    // first round however fast that is.
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
        tokio::select! {
            done = super::wait_all_done(&target, &ids) => done?,
            exited = first_exit(&mut processes) => return Err(exited),
        }
        let samples = sampler.stop();
        let first = first_round(&scratch.url).await?;
        let (_, last) = super::span(&target, &ids).await?;
        let took = (last.0 - first.0).to_std().unwrap_or_default();
        let cpu = Sample::over(&samples, first, last);
        let cores = |d: Option<Duration>| match (d, &cpu) {
            (Some(d), Some((_, window))) => {
                format!("{:.2}", d.as_secs_f64() / window.as_secs_f64())
            }
            _ => "-".into(),
        };
        let (machine, postgres, replicas, bench) = match &cpu {
            Some((s, _)) => (s.machine, s.postgres, s.replicas, s.bench),
            None => (None, None, None, None),
        };
        println!(
            "full queue, {count} process{plural}: {total} runs PENDING before the processes started, first round to last finish {} ({} after the spawn) -> {:.0} runs/s{}; cores busy: PostgreSQL {}, replicas {}, this bench {}",
            ms(took),
            ms((first.0 - spawned_at.0).to_std().unwrap_or_default()),
            total as f64 / took.as_secs_f64(),
            cpu_per_run(machine, total),
            cores(postgres),
            cores(replicas),
            cores(bench),
        );
        Ok(())
    }
    .await;
    for p in processes {
        p.kill().await?;
    }
    result
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

/// CPU used since the sampler started, at one moment.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Ts,
    machine: Option<Duration>,
    postgres: Option<Duration>,
    replicas: Option<Duration>,
    /// This process: its sampling and its looks at the plans.
    bench: Option<Duration>,
}

impl Sample {
    /// What was used between the last sample at or before `from` and the
    /// first at or after `to`, and how long that was; `None` if the
    /// samples do not surround the window.
    fn over(samples: &[Sample], from: Ts, to: Ts) -> Option<(Sample, Duration)> {
        let start = samples.iter().rev().find(|s| s.at.0 <= from.0)?;
        let end = samples.iter().find(|s| s.at.0 >= to.0)?;
        let minus = |a: Option<Duration>, b: Option<Duration>| Some(a?.saturating_sub(b?));
        let used = Sample {
            at: end.at,
            machine: minus(end.machine, start.machine),
            postgres: minus(end.postgres, start.postgres),
            replicas: minus(end.replicas, start.replicas),
            bench: minus(end.bench, start.bench),
        };
        Some((used, (end.at.0 - start.at.0).to_std().ok()?))
    }
}

/// Takes a [`Sample`] at [`Meters::new`], then every [`SAMPLE_EVERY`] on a
/// thread of its own (the reads of `/proc` are blocking) from
/// [`Meters::start`] until [`Sampler::stop`].
struct Meters {
    machine: CpuMeter,
    postgres: ProcessCpu,
    replicas: ProcessCpu,
    bench: ProcessCpu,
    samples: Vec<Sample>,
}

struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<Sample>>>,
}

const SAMPLE_EVERY: Duration = Duration::from_millis(50);

impl Sampler {
    /// The samples, the last one taken now.
    fn stop(mut self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread.take().expect("stopped only once");
        thread.join().unwrap_or_default()
    }
}

impl Meters {
    /// The meters, with their first sample taken.
    fn new() -> Self {
        let mut meters = Meters {
            machine: CpuMeter::start(),
            postgres: ProcessCpu::named("postgres"),
            replicas: ProcessCpu::pids([]),
            bench: ProcessCpu::pids([std::process::id()]),
            samples: Vec::new(),
        };
        meters.sample();
        meters
    }

    fn sample(&mut self) {
        self.samples.push(Sample {
            at: Ts::now(),
            machine: self.machine.busy(),
            postgres: self.postgres.busy(),
            replicas: self.replicas.busy(),
            bench: self.bench.busy(),
        });
    }

    /// Samples from now on, with the replicas' processes (started since the
    /// first sample, so counted from zero).
    fn start(mut self, replica_pids: impl IntoIterator<Item = u32>) -> Sampler {
        for pid in replica_pids {
            self.replicas.add(pid);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            loop {
                let done = stopping.load(Ordering::Relaxed);
                self.sample();
                if done {
                    return self.samples;
                }
                std::thread::sleep(SAMPLE_EVERY);
            }
        });
        Sampler {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Sampler {
    /// A bench that failed before [`Sampler::stop`] ends its thread too.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// When the first promotion round started: its runs' AVAILABLE events
/// carry the time the round took at its start.
async fn first_round(url: &str) -> anyhow::Result<Ts> {
    use sqlx::Connection;
    let mut db = sqlx::PgConnection::connect(url).await?;
    let first: Option<chrono::DateTime<chrono::Utc>> =
        sqlx::query_scalar("SELECT MIN(at) FROM run_event WHERE to_status = 'AVAILABLE'")
            .fetch_one(&mut db)
            .await?;
    first.map(Ts).context("no run was promoted")
}
