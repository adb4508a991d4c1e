//! Upserts this replica's row every heartbeat interval, so others (and the
//! node gate) know it is alive; deletes it on shutdown. Each beat reads
//! back whether an operator drains the worker, and tells the worker.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::loops::{Ownership, Probe, RunLedger, Worker, WriteTrouble};
use crate::store::{ReplicaInfo, Store, StoreError};
use domain::time::Ts;

/// Writes this replica's first heartbeat row, before any loop starts.
/// Each try gives up on a lock another client holds (SQLite's write
/// lock, a table or row lock on PostgreSQL) after the heartbeat's short
/// wait, so that the heartbeat loop keeps its pace; starting, there is no
/// pace to keep, and a replica that gave up would not start at all. So it
/// asks again until the lock goes, or until it is stopped.
pub async fn register(
    store: &dyn Store,
    info: &ReplicaInfo,
    shutdown: &CancellationToken,
) -> Result<(), StoreError> {
    let mut held_up = false;
    loop {
        match store.replica_upsert(info, Ts::now()).await {
            Ok(_) => return Ok(()),
            Err(e) if e.is_lock_wait() && !shutdown.is_cancelled() => {
                if !std::mem::replace(&mut held_up, true) {
                    tracing::warn!(
                        "this replica's first heartbeat is held up by a lock another client \
                         holds; it starts once the lock goes"
                    );
                }
            }
            Err(e) => return Err(e),
        }
    }
}

pub struct ReplicaHeartbeat {
    store: Arc<dyn RunLedger>,
    info: ReplicaInfo,
    interval: Duration,
    probe: Probe,
    ownership: Option<Arc<Ownership>>,
    worker: Option<Arc<Worker>>,
    last_words: super::LastWords,
    trouble: WriteTrouble,
}

impl ReplicaHeartbeat {
    pub fn new(store: Arc<dyn RunLedger>, info: ReplicaInfo, interval: Duration) -> Self {
        ReplicaHeartbeat {
            store,
            info,
            interval,
            probe: Probe::detached(),
            ownership: None,
            worker: None,
            last_words: super::LastWords::within(super::LAST_WRITE * 2),
            trouble: WriteTrouble::default(),
        }
    }

    /// The row's removal at shutdown comes last among the replica's last
    /// writes and shares their deadline.
    pub fn ending_with(mut self, last_words: super::LastWords) -> Self {
        self.last_words = last_words;
        self
    }

    /// Notes in `trouble` each beat the database refused or held up.
    pub fn noting_trouble(mut self, trouble: WriteTrouble) -> Self {
        self.trouble = trouble;
        self
    }

    /// Each recorded beat proves this replica still owns its runs.
    pub fn proving(mut self, ownership: Arc<Ownership>) -> Self {
        self.ownership = Some(ownership);
        self
    }

    /// Tells `worker` at each beat whether it drains.
    pub fn steering(mut self, worker: Arc<Worker>) -> Self {
        self.worker = Some(worker);
        self
    }

    /// Reports each beat to `probe` (for `/readyz`).
    pub fn reporting_to(mut self, probe: Probe) -> Self {
        self.probe = probe;
        self
    }

    pub async fn run_once(&self) -> Result<(), StoreError> {
        // Counted from before the write: the row says `Ts::now()` from here,
        // and others judge staleness from that stamp.
        let sent = std::time::Instant::now();
        let written = self.store.replica_upsert(&self.info, Ts::now()).await;
        // A write held up by another client's lock proves as much as one
        // recorded: the database answers, and the sweeper can neither write
        // this replica's row nor take the table's lock meanwhile
        // (docs/design.md, "Liveness").
        let held = written.as_ref().is_err_and(StoreError::is_lock_wait);
        if written.is_err() {
            self.trouble.seen();
        }
        if let (true, Some(ownership)) = (written.is_ok() || held, &self.ownership) {
            ownership.proven(sent);
        }
        if let (Ok(draining), Some(worker)) = (&written, &self.worker) {
            worker.set_draining(*draining);
        }
        written.map(|_| ())
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut held_up = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.cancelled() => break,
            }
            // Held up by a lock, it asks again at once: a write waiting in
            // the lock's queue is the first to get the row when it goes.
            loop {
                match self.run_once().await {
                    Ok(()) => {
                        self.probe.round_done();
                        held_up = false;
                    }
                    Err(e) if e.is_lock_wait() && !shutdown.is_cancelled() => {
                        if !std::mem::replace(&mut held_up, true) {
                            tracing::warn!(
                                "replica heartbeat held up by a lock another client holds; waiting for it"
                            );
                        }
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "replica heartbeat failed; will retry");
                        self.probe.round_failed(&e.into());
                    }
                }
                break;
            }
        }
        // After the runs' last words, in what is left of their time: the
        // row must outlive every finish, or the sweeper would take the runs
        // of a replica without a row for dead.
        let delete = self.store.replica_delete(&self.info.replica_id);
        let deadline = tokio::time::Instant::from_std(self.last_words.end_of_last_write());
        match tokio::time::timeout_at(deadline, delete).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not remove this replica's heartbeat row")
            }
            Err(_) => {
                tracing::warn!("the database did not take the heartbeat row's removal in time")
            }
        }
    }
}
