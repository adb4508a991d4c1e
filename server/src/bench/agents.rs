//! `baton bench --agents N`: what N connected agents cost one replica,
//! and how fast they pick up and burn down work (docs/agents.md).
//!
//! Two setups on one scratch PostgreSQL database, one after the other:
//! 1. a `baton serve` process that runs the tasks itself, with as many
//!    worker slots as the agents have in all;
//! 2. a `baton serve` process without workers and N agents of
//!    `--agent-slots` slots each, run in this process over the worker protocol (each with its
//!    own HTTP client, heartbeats and long-polling takes, as N machines'
//!    agents would be).
//!
//! For each: the replica process's CPU and its database connections
//! while idle (agents connected, nothing to do) and while working; take
//! latency (a run's AVAILABLE stamp to its claim) over single-run plans
//! submitted one after the other; and the throughput of `--runs` no-op
//! runs from a full queue.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use sqlx::postgres::PgPool;
use tokio_util::sync::CancellationToken;

use super::cpu_meter::ProcessCpu;
use super::serve_process::ServeProcess;
use crate::agent::protocol::{Hello, PROTOCOL};
use crate::agent::{RemoteLedger, Started};
use crate::bench::scratch::Scratch;
use crate::config::Settings;
use crate::executor::Registry;
use crate::store::Store;
use domain::time::Ts;

/// The replica's connections carry this name, to be counted apart.
const APPLICATION: &str = "baton-bench-replica";
/// How long the idle cost is measured over.
const IDLE_WINDOW: Duration = Duration::from_secs(10);
/// Tasks per plan in the throughput phase.
const PLAN_SIZE: usize = 1000;

pub async fn run(
    settings: &Settings,
    agents: usize,
    slots: usize,
    runs: usize,
    samples: usize,
) -> anyhow::Result<()> {
    let url = &settings.database.url.0;
    if !url.starts_with("postgres") {
        bail!("--agents needs PostgreSQL: set BATON_DATABASE_URL to a postgres:// URL");
    }
    anyhow::ensure!(
        (1..=10_000).contains(&agents) && (1..=10_000).contains(&(agents * slots)),
        "--agents and --agent-slots must be 1 or more, and 10000 slots in all at most"
    );
    raise_open_files();
    let scratch = Scratch::postgres(url).await?;
    let result = measure(settings, &scratch, agents, slots, runs, samples).await;
    scratch.drop_database().await?;
    result
}

/// Two connections per agent, on both ends of one machine: far above the
/// usual soft limit of 1024 open files.
fn raise_open_files() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct; setrlimit raises the soft limit
    // to the hard one, which any process may do.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// What one setup measured.
struct Figures {
    idle_cores: f64,
    idle_connections: i64,
    take_p50: Duration,
    take_p99: Duration,
    runs_per_second: f64,
    cpu_per_run: Duration,
    busy_connections: i64,
}

async fn measure(
    settings: &Settings,
    scratch: &Scratch,
    agents: usize,
    slots: usize,
    runs: usize,
    samples: usize,
) -> anyhow::Result<()> {
    let store = scratch.store().await?;
    let pool = PgPool::connect(&scratch.url).await?;
    let url = with_application(&scratch.url);
    println!(
        "baton bench --agents {agents} --agent-slots {slots}: one replica on PostgreSQL; {samples} take-latency samples, {runs} no-op runs"
    );

    let replica = ServeProcess::spawn(settings, &url, agents * slots)?;
    replica.registered(store.as_ref()).await?;
    let itself = setup(&replica, &store, &pool, runs, samples).await?;
    replica.kill().await?;

    let replica = ServeProcess::spawn_with(settings, &url, 0, &[("BATON_LABELS", "")])?;
    ready(&replica.base).await?;
    let stop = CancellationToken::new();
    let began = Instant::now();
    let started = start_agents(&replica.base, agents, slots, &stop).await?;
    println!(
        "{agents} agents connected in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    let with_agents = setup(&replica, &store, &pool, runs, samples).await?;
    stop.cancel();
    for agent in started {
        let _ = agent.done.await;
    }
    replica.kill().await?;

    println!();
    println!(
        "| | replica runs the tasks ({} slots) | {agents} agents, {slots} slot(s) each |",
        agents * slots
    );
    println!("|---|---|---|");
    let row = |name: &str, a: String, b: String| println!("| {name} | {a} | {b} |");
    row(
        "replica CPU, idle",
        format!("{:.3} cores", itself.idle_cores),
        format!("{:.3} cores", with_agents.idle_cores),
    );
    row(
        "replica's database connections, idle / working",
        format!("{} / {}", itself.idle_connections, itself.busy_connections),
        format!(
            "{} / {}",
            with_agents.idle_connections, with_agents.busy_connections
        ),
    );
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1000.0);
    row(
        "take latency p50 / p99",
        format!("{} / {}", ms(itself.take_p50), ms(itself.take_p99)),
        format!(
            "{} / {}",
            ms(with_agents.take_p50),
            ms(with_agents.take_p99)
        ),
    );
    row(
        "no-op runs per second, full queue",
        format!("{:.0}", itself.runs_per_second),
        format!("{:.0}", with_agents.runs_per_second),
    );
    row(
        "replica CPU per run",
        format!("{} µs", itself.cpu_per_run.as_micros()),
        format!("{} µs", with_agents.cpu_per_run.as_micros()),
    );
    Ok(())
}

/// The scratch URL with the replica's connections named.
fn with_application(url: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}application_name={APPLICATION}")
}

async fn ready(base: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(30) {
        let answer = http.get(format!("{base}/healthz")).send().await;
        if answer.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("the replica did not answer /healthz within 30 s")
}

/// Starts `n` in-process agents of `slots` slots each against `base`.
async fn start_agents(
    base: &str,
    n: usize,
    slots: usize,
    stop: &CancellationToken,
) -> anyhow::Result<Vec<Started>> {
    let mut hellos = tokio::task::JoinSet::new();
    for i in 0..n {
        let (base, stop) = (base.to_owned(), stop.clone());
        hellos.spawn(async move {
            let ledger = Arc::new(RemoteLedger::new(vec![base], None, &[], stop.clone())?);
            let hello = Hello {
                protocol: PROTOCOL,
                hostname: format!("bench-agent-{i}"),
                labels: Vec::new(),
                version: crate::version::VERSION_LONG.to_owned(),
                workers: slots as u32,
            };
            let registry = |_| Ok(Registry::builtin());
            crate::agent::start(ledger, hello, Duration::from_secs(5), registry, stop).await
        });
    }
    let mut started = Vec::with_capacity(n);
    while let Some(joined) = hellos.join_next().await {
        if let Some(agent) = joined?? {
            started.push(agent);
        }
    }
    anyhow::ensure!(started.len() == n, "only {} agents started", started.len());
    Ok(started)
}

async fn setup(
    replica: &ServeProcess,
    store: &Arc<dyn Store>,
    pool: &PgPool,
    runs: usize,
    samples: usize,
) -> anyhow::Result<Figures> {
    let pid = replica.pid().context("the replica exited")?;
    // Settled first: connections opened, first heartbeats written.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut cpu = ProcessCpu::pids([pid]);
    tokio::time::sleep(IDLE_WINDOW).await;
    let idle_cores = cpu.busy().unwrap_or_default().as_secs_f64() / IDLE_WINDOW.as_secs_f64();
    let idle_connections = connections(pool).await?;

    let mut plans = Vec::with_capacity(samples);
    for i in 0..samples {
        let plan = no_op_plan(&format!("latency-{i}"), 1)?;
        let id = store.plan_insert(&plan, "bench".into(), Ts::now()).await?;
        wait_done(pool, &[id]).await?;
        plans.push(id);
    }
    let (take_p50, take_p99) = take_latency(pool, &plans).await?;

    let mut ids = Vec::new();
    for (i, size) in sizes(runs).into_iter().enumerate() {
        let plan = no_op_plan(&format!("burn-{i}"), size)?;
        ids.push(store.plan_insert(&plan, "bench".into(), Ts::now()).await?);
    }
    let mut cpu = ProcessCpu::pids([pid]);
    let began = Instant::now();
    let busy_connections = wait_done(pool, &ids).await?;
    let took = began.elapsed();
    let replica_cpu = cpu.busy().unwrap_or_default();
    Ok(Figures {
        idle_cores,
        idle_connections,
        take_p50,
        take_p99,
        runs_per_second: runs as f64 / took.as_secs_f64(),
        cpu_per_run: replica_cpu / runs.max(1) as u32,
        busy_connections,
    })
}

fn sizes(runs: usize) -> Vec<usize> {
    let mut left = runs;
    let mut sizes = Vec::new();
    while left > 0 {
        let size = left.min(PLAN_SIZE);
        sizes.push(size);
        left -= size;
    }
    sizes
}

fn no_op_plan(name: &str, tasks: usize) -> anyhow::Result<crate::plan::NewPlan> {
    let tasks: Vec<_> = (0..tasks)
        .map(|i| serde_json::json!({"name": format!("t{i}"), "target": format!("{name}/{i}"), "sleep": "0s"}))
        .collect();
    let body = serde_json::to_vec(&serde_json::json!({"name": name, "tasks": tasks}))?;
    crate::plan::parse_json(&body).map_err(|e| anyhow::anyhow!("{}", e.message))
}

/// The replica's connections to the database now.
async fn connections(pool: &PgPool) -> anyhow::Result<i64> {
    let (n,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
            .bind(APPLICATION)
            .fetch_one(pool)
            .await?;
    Ok(n)
}

/// Waits until every run of `plans` is DONE; the most replica
/// connections seen meanwhile.
async fn wait_done(pool: &PgPool, plans: &[i64]) -> anyhow::Result<i64> {
    let began = Instant::now();
    let mut most = 0;
    loop {
        // On the live statuses' partial indexes: the bench's own look
        // must cost the database next to nothing.
        let (left,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM task_run WHERE plan_id = ANY($1)
               AND status IN ('PENDING', 'AVAILABLE', 'RUNNING')",
        )
        .bind(plans)
        .fetch_one(pool)
        .await?;
        most = most.max(connections(pool).await?);
        if left == 0 {
            return Ok(most);
        }
        if began.elapsed() > Duration::from_secs(600) {
            bail!("{left} runs were not DONE after 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// p50 and p99 of AVAILABLE stamp to claim, over the runs of `plans`.
async fn take_latency(pool: &PgPool, plans: &[i64]) -> anyhow::Result<(Duration, Duration)> {
    let mut micros: Vec<i64> = sqlx::query_scalar(
        "SELECT (EXTRACT(EPOCH FROM started_at - available_at) * 1000000)::BIGINT
         FROM task_run WHERE plan_id = ANY($1) AND available_at IS NOT NULL",
    )
    .bind(plans)
    .fetch_all(pool)
    .await?;
    anyhow::ensure!(!micros.is_empty(), "no run has both stamps");
    micros.sort_unstable();
    let at = |q: f64| {
        let i = ((micros.len() - 1) as f64 * q).round() as usize;
        Duration::from_micros(micros[i].max(0) as u64)
    };
    Ok((at(0.5), at(0.99)))
}
