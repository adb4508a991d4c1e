//! `baton agent`: runs tasks on a machine that is not a replica
//! (docs/agents.md). It holds no database credentials and serves nothing:
//! it says hello to a replica, then runs the replica's own worker, run
//! heartbeat, claimer, heartbeat and ownership watch over a
//! [`RemoteLedger`], so every promise a replica keeps for its runs (the
//! fences, the cut-off when it cannot prove it is alive, the hand-back at
//! shutdown) it keeps the same way.

pub mod args;
pub mod protocol;
mod remote_ledger;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use self::args::AgentArgs;
use self::protocol::{Hello, PROTOCOL, Welcome};
pub use self::remote_ledger::{RemoteLedger, TAKE_WAIT};
use crate::executor::Registry;
use crate::loops::{Claimer, ReplicaHeartbeat, RunLedger, SchedulerConfig, Worker};
use crate::store::ReplicaInfo;
use crate::version::VERSION_LONG;
use domain::time::Ts;

/// Between hellos while no replica answers.
const HELLO_RETRY: Duration = Duration::from_secs(1);

pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    args.check()?;
    let shutdown = CancellationToken::new();
    tokio::spawn(crate::stop_signal::stop_on_signal(shutdown.clone()));
    let ledger = Arc::new(RemoteLedger::new(
        args.servers()?,
        args.token.clone(),
        &args.extra_roots()?,
        shutdown.clone(),
    )?);
    let hello = Hello {
        protocol: PROTOCOL,
        hostname: gethostname::gethostname().to_string_lossy().into_owned(),
        labels: args.labels()?,
        version: VERSION_LONG.to_owned(),
        workers: args.workers as u32,
    };
    let registry =
        |stale_after| Ok(Registry::builtin().with_commands(args.command_executor(stale_after)?));
    let started = start(
        ledger.clone(),
        hello,
        args.shutdown_grace,
        registry,
        shutdown,
    )
    .await?;
    let Some(agent) = started else {
        return Ok(());
    };
    let refused = agent.done.await.unwrap_or(false);
    match refused.then(|| ledger.refusal()).flatten() {
        Some(why) => anyhow::bail!("{why}; stopped every execution"),
        None => {
            tracing::info!("stopped");
            Ok(())
        }
    }
}

/// An agent whose loops run.
pub struct Started {
    pub agent_id: String,
    /// Ends once the loops have (after shutdown, or a refusal: `true`).
    pub done: tokio::task::JoinHandle<bool>,
}

/// Says hello through `ledger` (until a replica answers, or `None` at
/// shutdown), then starts the agent's loops with the replica's timings
/// and the executors `registry` makes for its `stale_after`. `baton
/// agent` runs one; `baton bench --agents` runs many in one process.
pub async fn start(
    ledger: Arc<RemoteLedger>,
    hello: Hello,
    shutdown_grace: Duration,
    registry: impl FnOnce(Duration) -> anyhow::Result<Registry>,
    shutdown: CancellationToken,
) -> anyhow::Result<Option<Started>> {
    let Some(welcome) = say_hello(&ledger, &hello, &shutdown).await? else {
        return Ok(None);
    };
    let config = SchedulerConfig {
        workers: hello.workers as usize,
        heartbeat_interval: Duration::from_millis(welcome.heartbeat_interval_ms),
        stale_after: Duration::from_millis(welcome.stale_after_ms),
        shutdown_grace,
        max_log_bytes: usize::try_from(welcome.max_log_bytes).unwrap_or(usize::MAX),
        ..SchedulerConfig::default()
    };
    config.validate()?;
    let info = ReplicaInfo {
        replica_id: welcome.agent_id.clone(),
        hostname: hello.hostname,
        labels: hello.labels,
        version: hello.version,
        started_at: Ts::from_micros(welcome.started_at_micros),
    };
    tracing::info!(agent = %info.replica_id, labels = ?info.labels, workers = config.workers,
        "baton agent {} taking runs", crate::version::VERSION);
    let registry = registry(config.stale_after)?;
    let done = tokio::spawn(run_loops(ledger, info, config, registry, shutdown));
    Ok(Some(Started {
        agent_id: welcome.agent_id,
        done,
    }))
}

/// Says hello until a replica answers: `None` if shutdown came first.
async fn say_hello(
    ledger: &RemoteLedger,
    hello: &Hello,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<Welcome>> {
    loop {
        match ledger.hello(hello).await {
            Ok(welcome) => return Ok(Some(welcome)),
            Err(e) if ledger.refused.is_cancelled() => return Err(e.into()),
            Err(e) => tracing::warn!(error = %e, "no replica answered the hello yet; retrying"),
        }
        tokio::select! {
            _ = tokio::time::sleep(HELLO_RETRY) => {}
            _ = shutdown.cancelled() => return Ok(None),
        }
    }
}

/// The agent's loops until shutdown (or a refusal, which stops every
/// execution at once); returns whether a replica refused the agent.
///
/// The order is a replica's: at shutdown the claimer stops (a take
/// waiting at a replica is abandoned), the worker drains within the
/// grace and hands back the rest, and only then does the heartbeat stop
/// and remove the agent's row, so no sweeper takes a draining agent for
/// dead.
async fn run_loops(
    ledger: Arc<RemoteLedger>,
    info: ReplicaInfo,
    config: SchedulerConfig,
    registry: Registry,
    shutdown: CancellationToken,
) -> bool {
    let remote: Arc<dyn RunLedger> = ledger.clone();
    let worker = Arc::new(Worker::new(
        remote.clone(),
        info.replica_id.clone(),
        registry,
        &config,
    ));
    let drained = CancellationToken::new();
    let claims_stopped = CancellationToken::new();
    let heartbeat = tokio::spawn(
        ReplicaHeartbeat::new(remote.clone(), info.clone(), config.heartbeat_interval)
            .proving(worker.ownership())
            .steering(worker.clone())
            .ending_with(worker.last_words())
            .run(drained.clone()),
    );
    let watch = tokio::spawn(worker.clone().watch_ownership(drained.clone()));
    let claimer = Claimer::new(remote, worker.clone(), info.labels.clone(), &config);
    let claiming = {
        let (stop, stopped) = (shutdown.clone(), claims_stopped.clone());
        tokio::spawn(async move {
            let _stopped = stopped.drop_guard();
            claimer.run(stop).await;
        })
    };
    let draining = {
        let (worker, stopped, asked, drained) = (
            worker.clone(),
            claims_stopped.clone(),
            shutdown.clone(),
            drained.clone(),
        );
        tokio::spawn(async move {
            let _drained = drained.drop_guard();
            worker.run(stopped, asked).await;
        })
    };
    let refused = tokio::select! {
        _ = ledger.refused.cancelled() => {
            tracing::error!(why = ledger.refusal().unwrap_or_default(),
                "a replica refused this agent; stopping every execution now");
            worker.abandon_all();
            shutdown.cancel();
            true
        }
        _ = shutdown.cancelled() => false,
    };
    for (name, task) in [
        ("claimer", claiming),
        ("worker", draining),
        ("heartbeat", heartbeat),
        ("ownership", watch),
    ] {
        if let Err(e) = task.await {
            tracing::error!(loop_name = name, error = %e, "an agent loop panicked");
        }
    }
    refused || ledger.refused.is_cancelled()
}
