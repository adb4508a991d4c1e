//! `baton bench`: end-to-end throughput and latency with no-op runs.
//!
//! Three measurements, in one run so their figures compare:
//! 1. Latency on an idle system: single-task plans submitted one after the
//!    other; submit → RUNNING is the run's `started_at` minus the plan's
//!    `created_at` (both stamped by the same host clock).
//! 2. Throughput end to end: `--runs` `sleep: 0s` runs over `--plans` plans
//!    and `--targets` targets, submitted as fast as possible while the
//!    replicas work; runs/s is the number of runs over the time from the
//!    first submit until every run is DONE.
//! 3. Throughput from a full queue (in-process only): the same runs, all
//!    submitted (PENDING) before any replica starts, as job-queue
//!    benchmarks fill their queue first; runs/s from the replicas' start
//!    until every run is DONE. Each run still passes every gate and writes
//!    every event; only the submission is outside the clock.
//!
//! Beside each throughput the bench prints the machine's busy CPU time per
//! run over the very window the rate is timed over (`cpu_window.rs`), the
//! figure that compares across sittings of a VM whose speed swings, and
//! the busy cores of PostgreSQL's processes and of this process in it.
//!
//! Replicas run in this process (`--replicas`, each with its own pool and
//! id) on scratch databases, or the load goes to a running server
//! (`--server URL`), whose own replicas do the work (phases 1 and 2).
//!
//! The other modes each have their own file: `--render` and `--seed`
//! (`render.rs`), `--graph`, `--prune`, `--failover`, `--processes` (the
//! throughput phases worked by `baton serve` processes), and `--live`
//! (`live.rs`: what open dashboard tabs cost the database), `--agents`
//! (`agents.rs`: what connected agents cost a replica).

mod agents;
mod counted_source;
mod cpu_meter;
mod cpu_window;
mod failover;
mod fairness;
mod graph;
mod live;
mod processes;
mod prune;
mod render;
pub mod scratch;
pub mod seed;
mod serve_process;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use domain::model::{PlanStatus, PlanView};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use self::cpu_meter::CpuMeter;
use self::cpu_window::{Meters, Sample, cores};
use crate::bench::scratch::Scratch;
use crate::client::{ApiClient, PlanFormat};
use crate::config::Settings;
use crate::executor::Registry;
use crate::loops::{Replica, SchedulerConfig, new_replica_id};
use crate::store::{ReplicaInfo, Store};
use domain::time::Ts;

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Runs in the throughput phase.
    #[arg(long, default_value_t = 20_000)]
    pub runs: usize,
    /// Plans the runs are spread over.
    #[arg(long, default_value_t = 20)]
    pub plans: usize,
    /// Targets the runs are spread over.
    #[arg(long, default_value_t = 200)]
    pub targets: usize,
    /// Make every task exclusive on its target (one active run per target).
    #[arg(long)]
    pub exclusive: bool,
    /// Give every plan this parallel limit.
    #[arg(long)]
    pub limit: Option<i64>,
    /// In-process replicas [default: 2 on PostgreSQL, one per core of the
    /// 2-core machine the targets are set for; 1 on SQLite, which serves
    /// one process]. Replicas in one process share its cores, and each
    /// one more adds wake-ups, claims that find nothing and connections:
    /// 4 cost more CPU per run than 2 (docs/benchmarks.md).
    #[arg(long)]
    pub replicas: Option<usize>,
    /// Worker slots per in-process replica. No-op runs end at once, so
    /// slots bound nothing but the size of a claim: with too few, a
    /// replica claims, executes and stores in small rounds and the bench
    /// measures its slot count rather than the scheduler (on SQLite, 512
    /// gave about 15,000 runs/s end to end where 2048 gave 19,000).
    #[arg(long, default_value_t = 2048)]
    pub bench_workers: usize,
    /// Sequential single-run plans in the latency phase (after 20 that
    /// are not counted).
    #[arg(long, default_value_t = 200)]
    pub latency_samples: usize,
    /// Skip the full-queue phase.
    #[arg(long)]
    pub no_queued: bool,
    /// Full-queue phase: no-op runs the replicas work through before the
    /// queue is submitted and the clock starts, then stop, so that the
    /// timed replicas start on warm pools (0: on cold ones, whose opening
    /// and first statements are then timed too).
    #[arg(long, default_value_t = 4_000)]
    pub warm_up_runs: usize,
    /// A/B of an index's cost on the hot path: drop this index (a name
    /// from migrations/) from the scratch databases before measuring.
    /// Repeatable.
    #[arg(long = "drop-index", hide = true)]
    pub drop_index: Vec<String>,
    /// Work the throughput phases (end to end, then full queue) with this
    /// many `baton serve` processes (each with --bench-workers slots)
    /// instead of in-process replicas; no latency phase (PostgreSQL only).
    #[arg(long, conflicts_with_all = ["server", "replicas", "render", "seed", "graph", "failover", "prune", "live", "no_queued"])]
    pub processes: Option<usize>,
    /// Send the load to this running server instead of in-process replicas.
    #[arg(long)]
    pub server: Option<String>,
    /// API token for `--server` when it has users.
    #[arg(long, env = "BATON_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Measure agents instead (`agents.rs`): what this many connected
    /// `baton agent`s cost one replica (CPU, database connections), their
    /// take latency and their throughput of `--runs` no-op runs, beside a
    /// replica running the same work itself (PostgreSQL only).
    #[arg(long, conflicts_with_all = ["server", "processes", "render", "seed", "graph", "failover", "prune", "live", "fairness"])]
    pub agents: Option<usize>,
    /// `--agents`: worker slots of each agent (the replica it is compared
    /// with gets as many in all).
    #[arg(long, default_value_t = 1)]
    pub agent_slots: usize,
    /// Measure failover instead: SIGKILL a `baton serve` process holding
    /// runs and time until the sweeper resolved them (PostgreSQL only).
    #[arg(long)]
    pub failover: bool,
    /// `--failover`: processes to start.
    #[arg(long, default_value_t = 3)]
    pub failover_replicas: usize,
    /// `--failover`: long runs per process in each round.
    #[arg(long, default_value_t = 4)]
    pub failover_runs: usize,
    /// `--failover`: kills to time.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Measure the dashboard instead: seed a scratch database with
    /// `--seed-plans` x `--seed-tasks` finished runs plus one plan of
    /// `--seed-big-plan` tasks, then time server-side page renders.
    #[arg(long)]
    pub render: bool,
    /// Seed the configured database (BATON_DATABASE_URL) with that history
    /// and exit, to browse a large dashboard with `baton serve`.
    #[arg(long, conflicts_with = "render")]
    pub seed: bool,
    /// `--render`/`--seed`: finished plans.
    #[arg(long, default_value_t = 100_000)]
    pub seed_plans: i64,
    /// `--render`/`--seed`: tasks (one run each) per finished plan.
    #[arg(long, default_value_t = 10)]
    pub seed_tasks: i64,
    /// `--render`/`--seed`: tasks of the plan in flight.
    #[arg(long, default_value_t = 1_000)]
    pub seed_big_plan: i64,
    /// `--render`: timed requests per page.
    #[arg(long, default_value_t = 30)]
    pub requests: usize,
    /// Measure dependencies instead: a chain and a fan-in, each at two
    /// sizes ten times apart (submit time and time to DONE per task).
    #[arg(long)]
    pub graph: bool,
    /// Measure claim latency with and without pruning running: seeds
    /// `--seed-plans` x `--seed-tasks` finished runs, then times
    /// submit -> RUNNING while the history is deleted.
    #[arg(long, conflicts_with_all = ["render", "seed", "graph", "failover"])]
    pub prune: bool,
    /// Measure what open dashboard tabs cost the database instead: 1 and
    /// 50 tabs on the overview and on a plan page, polling every 2 s (the
    /// old way) and following the live feed, under a steady load.
    #[arg(long, conflicts_with_all = ["render", "seed", "graph", "failover", "prune"])]
    pub live: bool,
    /// `--live`: seconds each measurement counts over.
    #[arg(long, default_value_t = 15)]
    pub live_seconds: u64,
    /// Measure how one person's flood of requests slows another's instead
    /// (`fairness.rs`): a `baton serve` process with two users, one
    /// flooding it from a niced process while the other's requests are
    /// timed.
    #[arg(long, conflicts_with_all = ["render", "seed", "graph", "failover", "prune", "live"])]
    pub fairness: bool,
    /// `--fairness`: the flood's connections.
    #[arg(long, default_value_t = 64)]
    pub fairness_connections: usize,
    /// `--fairness`: seconds each phase is timed over.
    #[arg(long, default_value_t = 10)]
    pub fairness_seconds: u64,
    /// `--fairness`: the flood process's niceness (19: it stands in for
    /// a client on another machine; 0: it fights the server for the CPU).
    #[arg(long, default_value_t = 19)]
    pub fairness_nice: i32,
    /// The flood process of `--fairness`: asks for this URL from
    /// `--fairness-connections` connections with `--token`.
    #[arg(long, hide = true)]
    pub flood: Option<String>,
}

impl BenchArgs {
    /// Runs in each throughput phase: `--runs` rounded down to whole plans.
    fn throughput_runs(&self) -> usize {
        self.runs / self.plans * self.plans
    }
}

/// What the bench needs from the system under test.
#[async_trait::async_trait]
trait Target: Send + Sync {
    async fn submit(&self, plan: &serde_json::Value) -> anyhow::Result<i64>;
    async fn plan(&self, id: i64) -> anyhow::Result<PlanView>;

    /// What moves when the replicas change something, where the bench can
    /// see it (in process); `None` for a server across the network.
    fn changes(&self) -> Option<watch::Receiver<u64>> {
        None
    }
}

struct InProcess(Arc<dyn Store>);

#[async_trait::async_trait]
impl Target for InProcess {
    async fn submit(&self, plan: &serde_json::Value) -> anyhow::Result<i64> {
        let plan = crate::plan::parse_json(plan.to_string().as_bytes())?;
        Ok(self.0.plan_insert(&plan, "bench".into(), Ts::now()).await?)
    }

    async fn plan(&self, id: i64) -> anyhow::Result<PlanView> {
        Ok(self.0.plan_get(id).await?)
    }

    fn changes(&self) -> Option<watch::Receiver<u64>> {
        Some(self.0.signals().changes())
    }
}

#[async_trait::async_trait]
impl Target for ApiClient {
    async fn submit(&self, plan: &serde_json::Value) -> anyhow::Result<i64> {
        let body = serde_json::to_vec(plan)?;
        Ok(ApiClient::submit(self, body, PlanFormat::Json).await?.id)
    }

    async fn plan(&self, id: i64) -> anyhow::Result<PlanView> {
        ApiClient::plan(self, id).await
    }
}

pub async fn run(settings: Settings, args: BenchArgs) -> anyhow::Result<()> {
    let seed_spec = crate::bench::seed::SeedSpec {
        plans: args.seed_plans,
        tasks: args.seed_tasks,
        big_plan_tasks: args.seed_big_plan,
    };
    if args.render || args.seed || args.prune {
        anyhow::ensure!(
            args.seed_plans >= 1 && args.seed_tasks >= 1 && args.seed_big_plan >= 1,
            "--seed-plans, --seed-tasks and --seed-big-plan must be at least 1"
        );
        anyhow::ensure!(args.requests >= 1, "--requests must be at least 1");
    }
    if args.render || args.seed {
        let spec = seed_spec;
        return if args.seed {
            render::seed_configured(&settings, spec).await
        } else {
            render::run(&settings, spec, args.requests).await
        };
    }
    if let Some(url) = &args.flood {
        let token = args.token.as_deref().context("--flood needs --token")?;
        return fairness::flood(url, token, args.fairness_connections, args.fairness_seconds).await;
    }
    if args.fairness {
        anyhow::ensure!(
            args.fairness_connections >= 1 && args.fairness_seconds >= 1,
            "--fairness-connections and --fairness-seconds must be at least 1"
        );
        return fairness::run(
            &settings,
            fairness::Fairness {
                connections: args.fairness_connections,
                window: Duration::from_secs(args.fairness_seconds),
                nice: args.fairness_nice,
            },
        )
        .await;
    }
    if args.live {
        anyhow::ensure!(args.live_seconds >= 1, "--live-seconds must be at least 1");
        return live::run(&settings, Duration::from_secs(args.live_seconds)).await;
    }
    if let Some(agents) = args.agents {
        return agents::run(
            &settings,
            agents,
            args.agent_slots,
            args.runs,
            args.latency_samples,
        )
        .await;
    }
    if args.failover {
        return failover::run(
            &settings,
            args.failover_replicas,
            args.rounds,
            args.failover_runs,
        )
        .await;
    }
    anyhow::ensure!(
        args.plans >= 1 && args.targets >= 1 && args.runs >= args.plans,
        "need runs >= plans >= 1 and targets >= 1"
    );
    if let Some(processes) = args.processes {
        return processes::run(&settings, &args, processes).await;
    }
    if let Some(server) = &args.server {
        let target = ApiClient::new(server.trim_end_matches('/'), args.token.as_deref(), &[])?;
        println!("baton bench against {server} (its own replicas and settings)");
        return measure(&target, &args, false).await;
    }
    let url = &settings.database.url.0;
    let postgres = url.starts_with("postgres");
    let config = SchedulerConfig {
        workers: args.bench_workers,
        ..settings.scheduler()
    };
    let count = args.replicas.unwrap_or(if postgres { 2 } else { 1 }).max(1);
    if args.graph {
        return graph::run(url, count, &config).await;
    }
    if args.prune {
        return prune::run(url, count, &config, seed_spec).await;
    }
    println!(
        "baton bench: {}, {count} in-process replicas x {} workers, poll {:?}",
        if postgres { "PostgreSQL" } else { "SQLite" },
        config.workers,
        config.poll_interval
    );
    // Phases 1 and 2 share a scratch database; phase 3 gets its own, so
    // neither sees the other's history.
    let scratch = Scratch::new(url).await?;
    let stores = scratch.stores(count).await?;
    scratch.drop_indexes(&args.drop_index).await?;
    let replicas = Replicas::start(&stores, &config).await?;
    // Submit through the first replica's store, as the API of a server
    // does: its commits wake that replica's loops directly.
    let result = measure(&InProcess(stores[0].clone()), &args, postgres).await;
    replicas.stop().await;
    scratch.drop_database().await?;
    result?;
    if !args.no_queued {
        measure_queued(url, count, &config, &args).await?;
    }
    Ok(())
}

/// In-process replicas, each with its own store (pool) and id.
struct Replicas {
    running: Vec<Replica>,
    shutdown: CancellationToken,
}

impl Replicas {
    async fn start(stores: &[Arc<dyn Store>], config: &SchedulerConfig) -> anyhow::Result<Self> {
        let shutdown = CancellationToken::new();
        let mut running = Vec::new();
        for store in stores {
            let info = ReplicaInfo {
                replica_id: new_replica_id(),
                hostname: "bench".into(),
                labels: Vec::new(),
                version: crate::serve::VERSION.into(),
                started_at: Ts::now(),
            };
            running.push(
                Replica::start(
                    store.clone(),
                    info,
                    config.clone(),
                    Registry::builtin(),
                    shutdown.clone(),
                )
                .await?,
            );
        }
        Ok(Replicas { running, shutdown })
    }

    async fn stop(self) {
        self.shutdown.cancel();
        for r in self.running {
            if let Err(e) = r.join().await {
                tracing::error!(error = %e, "a benchmark replica's loop panicked");
            }
        }
    }
}

/// Phase 3: every run queued before the replicas start.
async fn measure_queued(
    url: &str,
    count: usize,
    config: &SchedulerConfig,
    args: &BenchArgs,
) -> anyhow::Result<()> {
    let scratch = Scratch::new(url).await?;
    // Pools are opened (and migrations checked) before the clock starts.
    let stores = scratch.stores(count).await?;
    scratch.drop_indexes(&args.drop_index).await?;
    let target = InProcess(stores[0].clone());
    warm_up(&target, &stores, config, args).await?;
    let plans = throughput_plans(args);
    let total = args.throughput_runs();
    let submitting = Instant::now();
    let cpu = CpuMeter::start();
    let ids = submit_all(&target, &plans).await?;
    println!(
        "full queue: {total} runs submitted in {} with no replica running{}",
        ms(submitting.elapsed()),
        cpu_per_run(cpu.busy(), total)
    );
    let sampler = Meters::new().start([]);
    let started = Ts::now();
    let replicas = Replicas::start(&stores, config).await?;
    let result = async {
        wait_all_done(&target, &ids).await?;
        let samples = sampler.stop();
        let (_, last) = span(&target, &ids).await?;
        let took = (last.0 - started.0).to_std().unwrap_or_default();
        println!(
            "full queue: {total} runs queued before the replicas started, all DONE {} after their start -> {:.0} runs/s{}",
            ms(took),
            total as f64 / took.as_secs_f64(),
            window_cpu(&samples, started, last, total, url.starts_with("postgres"))
        );
        Ok(())
    }
    .await;
    replicas.stop().await;
    scratch.drop_database().await?;
    result
}

/// Runs `--warm-up-runs` no-op runs to DONE on `stores` (submitted
/// through `target`) with replicas that then stop, before the full queue
/// is submitted.
///
/// Replicas that start work at once, as the loops of each do, open a
/// connection each in their first moments, and every connection prepares
/// and plans each statement anew. In a burn-down of 20,000 runs that
/// start-up was a tenth of the window's CPU, paid once per process
/// (docs/benchmarks.md). Warmed, the replicas that are timed start on
/// pools whose connections are open and whose statements are prepared, as
/// a long-running replica's are; `scripts/bench-peers.sh` warms
/// graphile-worker's pool the same way.
async fn warm_up(
    target: &InProcess,
    stores: &[Arc<dyn Store>],
    config: &SchedulerConfig,
    args: &BenchArgs,
) -> anyhow::Result<()> {
    if args.warm_up_runs == 0 {
        return Ok(());
    }
    let warm = BenchArgs {
        runs: args.warm_up_runs,
        plans: args.warm_up_runs.div_ceil(1_000),
        ..args.clone()
    };
    let started = Instant::now();
    let replicas = Replicas::start(stores, config).await?;
    let result = async {
        let ids = submit_all(target, &throughput_plans(&warm)).await?;
        wait_all_done(target, &ids).await
    }
    .await;
    replicas.stop().await;
    println!(
        "full queue: warm-up of {} runs, replicas stopped after {}",
        warm.throughput_runs(),
        ms(started.elapsed())
    );
    result
}

/// Pickups before the latency phase's samples, not counted.
const LATENCY_WARM_UP: usize = 20;

/// Phases 1 and 2 against `target`; `local_postgres`: its database is a
/// PostgreSQL server on this machine, whose processes' CPU is counted.
async fn measure(
    target: &dyn Target,
    args: &BenchArgs,
    local_postgres: bool,
) -> anyhow::Result<()> {
    // Phase 1: latency on an idle system, once the replicas are settled.
    // A replica's first moments are not its steady state: its LISTEN
    // connection comes up after it starts (the first sample of about one
    // bench in ten once waited for the 1 s poll for that, until a store
    // that starts listening woke its loops), and each pool connection
    // prepares its statements on first use.
    // graphile-worker's perfTest warms up likewise, with 100 jobs.
    if args.latency_samples > 0 {
        for i in 0..LATENCY_WARM_UP {
            pickup(target, &format!("bench-warm-up-{i}"), "bench/latency").await?;
        }
    }
    let mut latencies = Vec::with_capacity(args.latency_samples);
    for i in 0..args.latency_samples {
        latencies.push(pickup(target, &format!("bench-latency-{i}"), "bench/latency").await?);
    }
    if !latencies.is_empty() {
        latencies.sort();
        println!(
            "submit -> RUNNING, idle, {} samples: p50 {} p95 {} p99 {} max {}",
            latencies.len(),
            ms(percentile(&latencies, 50.0)),
            ms(percentile(&latencies, 95.0)),
            ms(percentile(&latencies, 99.0)),
            ms(*latencies.last().expect("not empty"))
        );
    }

    // Phase 2: throughput end to end.
    let plans = throughput_plans(args);
    let total = args.throughput_runs();
    let sampler = Meters::new().start([]);
    let started = Instant::now();
    let ids = submit_all(target, &plans).await?;
    let submitted = started.elapsed();
    wait_all_done(target, &ids).await?;
    let samples = sampler.stop();
    let (first, last) = span(target, &ids).await?;
    let end_to_end = (last.0 - first.0).to_std().unwrap_or_default();
    println!(
        "throughput: {total} runs, {} plans, {} targets{}{}: submitted in {}, all DONE after {} -> {:.0} runs/s end to end{}",
        args.plans,
        args.targets,
        if args.exclusive {
            ", exclusive"
        } else {
            ", shared"
        },
        args.limit
            .map(|l| format!(", plan limit {l}"))
            .unwrap_or_default(),
        ms(submitted),
        ms(end_to_end),
        total as f64 / end_to_end.as_secs_f64(),
        window_cpu(&samples, first, last, total, local_postgres)
    );
    Ok(())
}

/// The CPU figures of a phase timed from `from` to `to`: the machine's
/// per run, then the busy cores of PostgreSQL's processes (when it runs
/// on this machine for this bench) and of this process.
fn window_cpu(samples: &[Sample], from: Ts, to: Ts, runs: usize, postgres: bool) -> String {
    let Some((used, window)) = Sample::over(samples, from, to) else {
        return String::new();
    };
    let database = if postgres {
        format!("PostgreSQL {}, ", cores(used.postgres, window))
    } else {
        String::new()
    };
    format!(
        "{}; cores busy: {database}this process {}",
        cpu_per_run(used.machine, runs),
        cores(used.bench, window)
    )
}

/// The throughput phases' plans: `--runs` no-op runs over `--plans` plans
/// and `--targets` targets.
fn throughput_plans(args: &BenchArgs) -> Vec<serde_json::Value> {
    let per_plan = args.runs / args.plans;
    (0..args.plans)
        .map(|p| {
            let tasks: Vec<_> = (0..per_plan)
                .map(|t| {
                    serde_json::json!({
                        "name": format!("t{t}"),
                        "target": format!("bench/target-{}", (p * per_plan + t) % args.targets),
                        "exclusive": args.exclusive,
                        "sleep": "0s",
                    })
                })
                .collect();
            let mut plan = serde_json::json!({"name": format!("bench-{p}"), "tasks": tasks});
            if let Some(limit) = args.limit {
                plan["parallel_limit"] = limit.into();
            }
            plan
        })
        .collect()
}

/// Submits `plans` one after the other, as one client would; their ids.
async fn submit_all(target: &dyn Target, plans: &[serde_json::Value]) -> anyhow::Result<Vec<i64>> {
    let mut ids = Vec::with_capacity(plans.len());
    for plan in plans {
        ids.push(target.submit(plan).await?);
    }
    Ok(ids)
}

/// Waits (up to 10 minutes) until every plan in `ids` is DONE.
///
/// Plans finish roughly in the order they were submitted, so this watches
/// the last one, every half second, and then checks the others once each
/// (a DONE plan with no retry stays DONE). Each look reads a whole plan, or
/// with a list every plan's counts: database work that competes with the
/// runs being measured, so it is kept rare. The figures come from the
/// runs' own timestamps; looking rarely only delays noticing the end.
async fn wait_all_done(target: &dyn Target, ids: &[i64]) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    for (done, id) in ids.iter().rev().enumerate() {
        while target.plan(*id).await?.status != PlanStatus::Done {
            if Instant::now() > deadline {
                bail!(
                    "throughput phase did not finish within 10 minutes ({done} of {} plans done)",
                    ids.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(())
}

/// When the first of these plans was created and their last run finished.
async fn span(target: &dyn Target, ids: &[i64]) -> anyhow::Result<(Ts, Ts)> {
    let mut first_created = None;
    let mut last_finished = None;
    for id in ids {
        let view = target.plan(*id).await?;
        first_created = first_created
            .min(Some(view.created_at))
            .or(Some(view.created_at));
        for t in &view.tasks {
            last_finished = last_finished.max(t.finished_at);
        }
    }
    match (first_created, last_finished) {
        (Some(first), Some(last)) => Ok((Ts(first), Ts(last))),
        _ => bail!("no run finished"),
    }
}

/// Submits a plan of one no-op task on `on` and returns its run's submit
/// → RUNNING time, from the stored `created_at` and `started_at`.
///
/// In process it reads the plan only when the replicas signal a change.
/// Read every millisecond instead (as a remote server still is), the
/// bench's own reads, four statements each, kept a database connection
/// and part of a core busy beside the very pickup they timed.
async fn pickup(target: &dyn Target, name: &str, on: &str) -> anyhow::Result<Duration> {
    let plan = serde_json::json!({
        "name": name,
        "tasks": [{"name": "noop", "target": on, "sleep": "0s"}],
    });
    let mut changes = target.changes();
    let id = target.submit(&plan).await?;
    if let Some(changes) = &mut changes {
        // The submit's own signal: nothing has run yet.
        changes.borrow_and_update();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match &mut changes {
            // A missed signal costs the wait, never the figure.
            Some(changes) => {
                let _ = tokio::time::timeout(Duration::from_millis(50), changes.changed()).await;
            }
            None => tokio::time::sleep(Duration::from_millis(1)).await,
        }
        let view = target.plan(id).await?;
        match view.status {
            PlanStatus::Done => {
                let started = view.tasks[0]
                    .started_at
                    .context("a DONE run has started_at")?;
                return Ok((started - view.created_at).to_std().unwrap_or_default());
            }
            PlanStatus::Failed | PlanStatus::Canceled | PlanStatus::Halted => {
                bail!("plan {id} ended {}", view.status)
            }
            _ if Instant::now() > deadline => bail!("plan {id} not done within 30 s"),
            _ => {}
        }
    }
}

/// Waits for plan `id` to end, looking every `poll`: a plan of thousands
/// of tasks is read whole each time, work that competes with the runs
/// measured.
async fn wait_done_polling(
    target: &dyn Target,
    id: i64,
    within: Duration,
    poll: Duration,
) -> anyhow::Result<PlanView> {
    let deadline = Instant::now() + within;
    loop {
        let view = target.plan(id).await?;
        match view.status {
            PlanStatus::Done => return Ok(view),
            PlanStatus::Failed | PlanStatus::Canceled | PlanStatus::Halted => {
                bail!("plan {id} ended {}", view.status)
            }
            _ if Instant::now() > deadline => bail!("plan {id} not done within {within:?}"),
            _ => tokio::time::sleep(poll).await,
        }
    }
}

/// This machine's busy CPU time over a phase and per run, as a suffix for
/// the phase's line: steadier than runs/s on a VM whose speed swings,
/// though it also counts whatever else ran meanwhile (and, with
/// `--server` on another host, only this host). The phase's window ends
/// once the bench has seen every plan DONE, a little after the last run;
/// that tail is idle.
fn cpu_per_run(busy: Option<Duration>, runs: usize) -> String {
    match busy {
        Some(busy) if runs > 0 => format!(
            "; machine busy {:.2} core-s = {:.0} µs CPU/run",
            busy.as_secs_f64(),
            busy.as_secs_f64() * 1e6 / runs as f64
        ),
        _ => String::new(),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}
