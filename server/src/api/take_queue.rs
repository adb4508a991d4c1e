//! The agents' waiting takes on one replica (docs/agents.md, "The worker
//! protocol"). A take that finds nothing waits here, holding no database
//! connection; one task claims for the waiters, oldest first, when runs
//! become AVAILABLE (or every poll interval, as a fallback).
//!
//! Hundreds of agents wait at once, so a wake-up must not mean a claim
//! per agent. Once one claim comes back short, no unpinned run is left
//! and none pinned to that agent's labels: later waiters are asked for
//! only if their labels name a node some AVAILABLE run is pinned to (one
//! cheap read, on the partial index of pinned AVAILABLE runs). A wake-up
//! with nothing for anyone costs one or two statements, not one per agent.
//!
//! Drained agents (docs/agents.md, "Draining") get nothing: which they are
//! is read in one statement for every take and waiter, at most every
//! [`DRAINED_FRESH`], not once per take.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::store::{Claim, ClaimedRun, Store};
use domain::time::Ts;

/// How old the list of drained agents may be when a take is judged by it:
/// a drain reaches takes within this (a worker hears of its own within a
/// heartbeat anyway).
pub const DRAINED_FRESH: Duration = Duration::from_millis(250);

/// The drained workers as last read, and when.
#[derive(Default)]
struct Drained {
    read_at: Option<Instant>,
    ids: HashSet<String>,
}

/// One take waiting for runs.
pub struct Waiter {
    pub agent_id: String,
    pub labels: Vec<String>,
    pub slots: i64,
    /// The availability generation its last claim saw: a later one means
    /// runs became AVAILABLE since.
    pub seen: u64,
    pub until: Instant,
    answer: oneshot::Sender<Vec<ClaimedRun>>,
}

#[derive(Clone)]
pub struct TakeQueue {
    inner: Arc<Inner>,
}

struct Inner {
    waiting: Mutex<Vec<Waiter>>,
    arrived: Notify,
    stopped: CancellationToken,
    drained: tokio::sync::Mutex<Drained>,
}

impl Inner {
    /// Whether an operator drains `agent_id`, from the database's list at
    /// most [`DRAINED_FRESH`] old.
    async fn drained(&self, store: &dyn Store, agent_id: &str) -> crate::store::Result<bool> {
        let mut drained = self.drained.lock().await;
        if drained
            .read_at
            .is_none_or(|at| at.elapsed() >= DRAINED_FRESH)
        {
            drained.ids = store.replicas_draining().await?.into_iter().collect();
            drained.read_at = Some(Instant::now());
        }
        Ok(drained.ids.contains(agent_id))
    }
}

impl TakeQueue {
    /// Starts the task that claims for waiters, until `stop` (then every
    /// waiter is answered with nothing, for its agent to ask another
    /// replica).
    pub fn start(
        store: Arc<dyn Store>,
        heartbeat_timeout: Duration,
        poll_interval: Duration,
        stop: CancellationToken,
    ) -> Self {
        let inner = Arc::new(Inner {
            waiting: Mutex::new(Vec::new()),
            drained: tokio::sync::Mutex::default(),
            arrived: Notify::new(),
            stopped: stop,
        });
        tokio::spawn(dispatch(
            inner.clone(),
            store,
            heartbeat_timeout,
            poll_interval,
        ));
        TakeQueue { inner }
    }

    /// Whether an operator drains `agent_id` (its takes claim nothing).
    pub async fn drained(&self, store: &dyn Store, agent_id: &str) -> crate::store::Result<bool> {
        self.inner.drained(store, agent_id).await
    }

    /// Waits until runs are claimed for this take or `until`; never
    /// answers early with nothing unless the replica stops. The answer
    /// comes from the dispatcher alone, so a claim is never made for a
    /// take that has already answered.
    pub async fn wait(
        &self,
        agent_id: &str,
        labels: &[String],
        slots: i64,
        seen: u64,
        until: Instant,
    ) -> Vec<ClaimedRun> {
        if self.inner.stopped.is_cancelled() {
            return Vec::new();
        }
        let (answer, answered) = oneshot::channel();
        self.inner.waiting.lock().expect("poisoned").push(Waiter {
            agent_id: agent_id.to_owned(),
            labels: labels.to_vec(),
            slots,
            seen,
            until,
            answer,
        });
        self.inner.arrived.notify_one();
        answered.await.unwrap_or_default()
    }
}

async fn dispatch(
    inner: Arc<Inner>,
    store: Arc<dyn Store>,
    heartbeat_timeout: Duration,
    poll_interval: Duration,
) {
    let mut available = store.signals().availabilities();
    let mut poll = tokio::time::interval(poll_interval);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let next_deadline = inner
            .waiting
            .lock()
            .expect("poisoned")
            .iter()
            .map(|w| w.until)
            .min();
        let mut everyone = false;
        tokio::select! {
            _ = available.changed() => {}
            _ = inner.arrived.notified() => {}
            _ = poll.tick() => everyone = true,
            _ = sleep_until(next_deadline) => {}
            _ = inner.stopped.cancelled() => break,
        }
        let generation = *available.borrow_and_update();
        serve(
            &inner,
            store.as_ref(),
            heartbeat_timeout,
            generation,
            everyone,
        )
        .await;
    }
    // Stopping: every waiter hears nothing now and asks elsewhere.
    inner.waiting.lock().expect("poisoned").clear();
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One pass over the waiters, oldest first: claims for those that may
/// find something, answers those that got runs or whose wait is over.
async fn serve(
    inner: &Inner,
    store: &dyn Store,
    heartbeat_timeout: Duration,
    generation: u64,
    everyone: bool,
) {
    let waiting = std::mem::take(&mut *inner.waiting.lock().expect("poisoned"));
    if waiting.is_empty() {
        return;
    }
    let mut kept = Vec::with_capacity(waiting.len());
    // Set once a claim came back short: the nodes some AVAILABLE run is
    // still pinned to, the only runs later waiters could find.
    let mut pinned_left: Option<HashSet<String>> = None;
    let now = Instant::now();
    for mut waiter in waiting {
        if waiter.answer.is_closed() {
            continue;
        }
        if now >= waiter.until {
            let _ = waiter.answer.send(Vec::new());
            continue;
        }
        let due = everyone || waiter.seen < generation;
        let hopeless = pinned_left
            .as_ref()
            .is_some_and(|nodes| !waiter.labels.iter().any(|l| nodes.contains(l)));
        if !due || hopeless {
            waiter.seen = waiter.seen.max(generation);
            kept.push(waiter);
            continue;
        }
        // Drained: it waits on, and is asked again at the next raise or
        // poll, in case the drain was lifted meanwhile.
        match inner.drained(store, &waiter.agent_id).await {
            Ok(true) => {
                kept.push(waiter);
                continue;
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot read whether a waiting agent drains; will retry");
                kept.push(waiter);
                continue;
            }
        }
        let claim = Claim {
            replica_id: &waiter.agent_id,
            labels: &waiter.labels,
            limit: waiter.slots,
            heartbeat_timeout,
        };
        let claimed = match store.run_claim_many(&claim, Ts::now()).await {
            Ok(claimed) => claimed,
            Err(e) => {
                tracing::warn!(error = %e, "a waiting agent's claim failed; will retry");
                kept.push(waiter);
                continue;
            }
        };
        waiter.seen = generation;
        let short = (claimed.len() as i64) < waiter.slots;
        if short && pinned_left.is_none() {
            match store.run_available_nodes().await {
                Ok(nodes) => pinned_left = Some(nodes.into_iter().collect()),
                Err(e) => tracing::warn!(error = %e,
                    "cannot read which nodes AVAILABLE runs are pinned to; asking every waiter"),
            }
        }
        if claimed.is_empty() {
            kept.push(waiter);
            continue;
        }
        let ids: Vec<i64> = claimed.iter().map(|r| r.id).collect();
        if waiter.answer.send(claimed).is_err() {
            // The agent hung up while the claim ran: its runs go back
            // now rather than wait for the sweeper.
            let detail = format!(
                "handed back by the replica: agent {} stopped waiting before its take was answered",
                waiter.agent_id
            );
            if let Err(e) = store
                .run_hand_back_many(&waiter.agent_id, &ids, &detail, Ts::now())
                .await
            {
                tracing::warn!(error = %e, runs = ?ids,
                    "could not hand back runs of a take nobody waits for; the sweeper will resolve them");
            }
        }
    }
    // Waiters that came meanwhile wait behind those kept.
    let mut waiting = inner.waiting.lock().expect("poisoned");
    let newer = std::mem::take(&mut *waiting);
    kept.extend(newer);
    *waiting = kept;
}
