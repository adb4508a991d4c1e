//! Executes claimed runs and reports how they ended.
//!
//! Each claimed run gets a task that drives its executor, a log writer and
//! a cancellation token. Three things end an execution early: the hard
//! deadline (the run FAILS with "timed out"), losing the run — a fenced
//! write (heartbeat or log line) affected no row because the run was
//! cancelled, swept or taken over — and the end of the shutdown grace
//! period. A lost run is killed at once and nothing more is written to it;
//! a run stopped by shutdown is handed back (AVAILABLE, same attempt) for
//! another replica. Finishes go through one batched writer
//! (`run_finish_many`), so a busy replica spends one transaction on many
//! runs; a worker slot frees as its execution ends, while the finish is
//! stored (the run stays this replica's, beaten, until then).
//!
//! Each run's own heartbeat is [`RunHeartbeat`]'s, which this worker runs
//! beside its finish writer.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use domain::model::RunStatus;
use tokio::sync::{Mutex as AsyncMutex, MutexGuard, Notify, OwnedMutexGuard, mpsc};
use tokio_util::sync::CancellationToken;

use super::RunLedger;
use super::SchedulerConfig;
use super::counters::{Claimant, RunCounters};
use super::ownership::Ownership;
use crate::executor::{LogSink, Outcome, Registry, RunContext, output};
use crate::loops::{LAST_WRITE, LastWords, RunHandle, RunHeartbeat, RunTable};
use crate::store::{ClaimedRun, Finish, LogLine, StoreError};
use domain::time::Ts;

/// Finishes written per transaction, at most.
const FINISH_BATCH: usize = 2048;
/// Turns a claim gives executions that are ready to end
/// ([`Worker::settled_free_slots`]), at most.
const GATHER_TURNS: usize = 8;
/// Log lines written per transaction, at most.
const LOG_BATCH: usize = 512;
/// After the grace period, how long stopped executions get to end before
/// the replica hands back whatever is left and exits anyway.
pub(crate) const STOP_WAIT: Duration = Duration::from_secs(10);

pub struct Worker {
    store: Arc<dyn RunLedger>,
    replica_id: String,
    registry: Registry,
    workers: usize,
    heartbeat_interval: Duration,
    shutdown_grace: Duration,
    /// The most of one run's output stored (`--max-log-bytes`).
    max_log_bytes: usize,
    running: RunTable,
    /// Held by whoever claims for this replica ([`Worker::claim_turn`]).
    claiming: Arc<AsyncMutex<()>>,
    /// Runs stopped by shutdown, to hand back once their executions ended.
    handed: Mutex<Vec<i64>>,
    /// When shutdown's last writes must be done by.
    last_words: LastWords,
    finishes: mpsc::UnboundedSender<Finish>,
    finish_queue: Mutex<Option<mpsc::UnboundedReceiver<Finish>>>,
    /// Raised when a slot frees up, for the claimer.
    pub slot_freed: Notify,
    /// Raised on the same release, for the drain: a run can leave without
    /// a finish (lost to a fence, or abandoned), and the drain must hear
    /// of it then, not at the end of the grace. (Each `Notify` has one
    /// waiter; the claimer's is `slot_freed`.)
    released: Notify,
    counters: Arc<RunCounters>,
    /// Proven by each recorded replica heartbeat; see [`Ownership`].
    ownership: Arc<Ownership>,
    /// An operator drains this worker (its heartbeat reads it back): no
    /// slot counts as free, so neither the claimer nor a round claims.
    draining: AtomicBool,
}

impl Worker {
    pub fn new(
        store: Arc<dyn RunLedger>,
        replica_id: String,
        registry: Registry,
        config: &SchedulerConfig,
    ) -> Self {
        let (finishes, queue) = mpsc::unbounded_channel();
        Worker {
            store,
            replica_id,
            registry,
            workers: config.workers,
            heartbeat_interval: config.heartbeat_interval,
            shutdown_grace: config.shutdown_grace,
            max_log_bytes: config.max_log_bytes,
            running: RunTable::default(),
            claiming: Arc::default(),
            handed: Mutex::new(Vec::new()),
            last_words: LastWords::within(config.shutdown_grace),
            finishes,
            finish_queue: Mutex::new(Some(queue)),
            slot_freed: Notify::new(),
            released: Notify::new(),
            counters: Arc::default(),
            ownership: Arc::new(Ownership::new(config.stale_after)),
            draining: AtomicBool::new(false),
        }
    }

    /// What the last heartbeat read back of an operator's drain.
    pub fn set_draining(&self, draining: bool) {
        if self.draining.swap(draining, Ordering::SeqCst) == draining {
            return;
        }
        match draining {
            true => tracing::info!(
                running = self.running.lock().expect("poisoned").len(),
                "an operator drains this worker: it takes no new run and finishes those it has"
            ),
            false => {
                tracing::info!("the drain was lifted: this worker takes runs again");
                self.slot_freed.notify_one();
            }
        }
    }

    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// What the replica heartbeat proves and the claimer consults.
    pub fn ownership(&self) -> Arc<Ownership> {
        self.ownership.clone()
    }

    /// Stops an execution once this replica can no longer prove it owns
    /// the run — its replica heartbeat or the run's own heartbeat has not
    /// been recorded for three quarters of the time after which the
    /// sweeper may fail it — on a clock of its own: the loops that talk to
    /// the database may hang for as long as the database (or a lock held by
    /// a frozen replica) keeps them waiting.
    pub async fn watch_ownership(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            let replica_deadline = self.ownership.deadline();
            let run_deadline = self
                .running
                .lock()
                .expect("poisoned")
                .values()
                .filter(|h| h.executing() && !h.cut_off.load(Ordering::SeqCst))
                .map(|h| h.proven_until())
                .min();
            let now = Instant::now();
            let next = run_deadline.map_or(replica_deadline, |d| d.min(replica_deadline));
            // Past the replica's deadline with nothing left to stop, or
            // nothing running: look again a heartbeat later.
            let wake = if next <= now && run_deadline.is_none_or(|d| d > now) {
                now + self.heartbeat_interval
            } else {
                next.max(now + Duration::from_millis(10))
            };
            tokio::select! {
                _ = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {}
                // A new run's deadline may come sooner than the wake.
                _ = tokio::time::sleep(self.heartbeat_interval) => {}
                _ = shutdown.cancelled() => return,
            }
            self.cut_off_unproven();
        }
    }

    /// Stops every execution whose ownership is no longer proven. The
    /// watcher may wake late (a starved runtime), after a late heartbeat
    /// answer already ended a lapse: [`RunHandle::unproven`] still counts
    /// that lapse against the runs claimed before it.
    fn cut_off_unproven(&self) {
        let now = Instant::now();
        let running = self.running.lock().expect("poisoned");
        let mut stopped = Vec::new();
        for (id, handle) in running.iter() {
            if handle.unproven(&self.ownership, now)
                && handle.executing()
                && !handle.cut_off.swap(true, Ordering::SeqCst)
            {
                handle.cancel.cancel();
                stopped.push(*id);
            }
        }
        if !stopped.is_empty() {
            tracing::warn!(
                runs = ?stopped,
                replica_unproven_for = %humantime::format_duration(self.ownership.unproven_for()),
                "heartbeats not recorded in time: stopping these executions before \
                 another replica may retry them"
            );
        }
    }

    /// The run heartbeat over this worker's runs.
    fn run_heartbeat(&self) -> RunHeartbeat {
        RunHeartbeat::new(
            self.store.clone(),
            self.replica_id.clone(),
            self.heartbeat_interval,
            self.running.clone(),
        )
    }

    pub fn replica_id(&self) -> &str {
        &self.replica_id
    }

    /// What this replica claimed and finished since it started.
    pub fn counters(&self) -> Arc<RunCounters> {
        self.counters.clone()
    }

    /// Worker slots not taken by an execution; none while an operator
    /// drains the worker. An execution's slot frees as it ends, before its
    /// finish is stored: the next claim then overlaps that write instead of
    /// waiting for it. Ended runs whose finishes are not stored yet take
    /// slots again past `workers` of them, so a database that refuses
    /// finishes stops the claims before it fills the replica's memory.
    pub fn free_slots(&self) -> usize {
        if self.draining() {
            return 0;
        }
        let running = self.running.lock().expect("poisoned");
        let ended = running
            .values()
            .filter(|handle| handle.finishing.load(Ordering::SeqCst))
            .count();
        // At most `workers` ended runs give their slots back.
        let taken = running.len() - ended.min(self.workers);
        self.workers.saturating_sub(taken)
    }

    /// [`Worker::free_slots`] once the executions that are about to end
    /// have: the first of a batch to end wakes the claimer while the rest
    /// are still queued to run, and a claim for that one slot would cost a
    /// transaction (and the claim lock's turn) of its own. Each turn lets
    /// every ready task run once; it stops at the first turn that frees
    /// nothing, so no claim waits for an execution that is still working.
    pub async fn settled_free_slots(&self) -> usize {
        let mut free = self.free_slots();
        for _ in 0..GATHER_TURNS {
            tokio::task::yield_now().await;
            let now = self.free_slots();
            if now <= free {
                return now;
            }
            free = now;
        }
        free
    }

    /// The turn to claim for this replica, held from reading
    /// [`Worker::free_slots`] until the claimed runs are spawned. A replica
    /// claims in two places, its claimer and (on the leader) the promotion
    /// round; two claims at once could count the same free slot and start
    /// more runs than the replica has workers. The claimer waits for its
    /// turn (a round's claim is short); tokio's lock is fair, so rounds
    /// cannot keep it from the claimer.
    pub async fn claim_turn(&self) -> MutexGuard<'_, ()> {
        self.claiming.lock().await
    }

    /// [`Worker::claim_turn`] if no claim is in flight: a round does not
    /// wait for the claimer, it leaves its runs AVAILABLE instead. Owned,
    /// so the round can keep it until its runs are spawned.
    pub fn try_claim_turn(&self) -> Option<OwnedMutexGuard<()>> {
        self.claiming.clone().try_lock_owned().ok()
    }

    /// Stops every execution and writes nothing more for their runs: this
    /// worker may no longer act for them (an agent whose token a replica
    /// refused). The sweeper resolves them as a dead worker's.
    pub fn abandon_all(&self) {
        for (id, handle) in self.running.lock().expect("poisoned").iter() {
            handle.lose(*id);
        }
    }

    /// Ids of runs this replica is executing.
    pub fn running_ids(&self) -> Vec<i64> {
        self.running
            .lock()
            .expect("poisoned")
            .keys()
            .copied()
            .collect()
    }

    /// Starts executing freshly claimed runs. `claimed_at` is when the
    /// claim was sent: the database stamped the runs' heartbeat deadlines
    /// from then or a little later (once the claim held its lock), so
    /// their ownership is proven from then, not from when the answer
    /// arrived.
    ///
    /// An answer that comes back too late to prove ownership (a slow or
    /// delayed connection: the run's deadline may already have passed, or
    /// the replica's own proof lapsed while the answer was on its way, and
    /// the sweeper failed the run and started its retry elsewhere) starts
    /// nothing; those runs are handed back, fenced, for another claim.
    pub fn spawn_all(
        self: &Arc<Self>,
        claimed: Vec<ClaimedRun>,
        claimed_at: Instant,
        by: Claimant,
    ) {
        self.counters.claimed(claimed.len(), by);
        let now = Instant::now();
        let mut late = Vec::new();
        for run in claimed {
            let beat_every = run
                .heartbeat_interval
                .unwrap_or(self.heartbeat_interval)
                .min(run.heartbeat_timeout / 2);
            let handle = Arc::new(RunHandle {
                cancel: CancellationToken::new(),
                lost: AtomicBool::new(false),
                handing_back: AtomicBool::new(false),
                canceling: AtomicBool::new(false),
                cut_off: AtomicBool::new(false),
                finishing: AtomicBool::new(false),
                beat_every,
                beat_timeout: run.heartbeat_timeout,
                next_beat: Mutex::new(claimed_at + beat_every),
                proven_at: Mutex::new(claimed_at),
                claimed_at,
            });
            // Both proofs count: a lapse of the replica's own, even one
            // ended by now, lets the sweeper fail these runs on the
            // replica's stale row, whatever their own deadlines say.
            if handle.unproven(&self.ownership, now) {
                late.push(run.id);
                continue;
            }
            self.running
                .lock()
                .expect("poisoned")
                .insert(run.id, handle.clone());
            tokio::spawn(self.clone().execute(run, handle));
        }
        if !late.is_empty() {
            tokio::spawn(self.clone().hand_back_late(late, now - claimed_at));
        }
    }

    /// Returns runs whose claim was answered too late to run them.
    async fn hand_back_late(self: Arc<Self>, ids: Vec<i64>, took: Duration) {
        tracing::warn!(runs = ?ids, took = %humantime::format_duration(took),
            "the claim was answered too late to prove these runs are still this replica's; \
             not running them");
        let detail = format!(
            "handed back unexecuted by replica {}: its claim was answered after {} ms, \
             too late to be sure no other replica has the run",
            self.replica_id,
            took.as_millis()
        );
        match self
            .store
            .run_hand_back_many(&self.replica_id, &ids, &detail, Ts::now())
            .await
        {
            Ok(back) => tracing::info!(runs = ?back, "handed late-claimed runs back"),
            Err(e) => tracing::warn!(error = %e, runs = ?ids,
                "could not hand late-claimed runs back; the sweeper will fail them"),
        }
    }

    async fn execute(self: Arc<Self>, run: ClaimedRun, handle: Arc<RunHandle>) {
        let (log, lines) = LogSink::new(self.max_log_bytes);
        let writer = tokio::spawn(self.clone().write_logs(run.id, lines, handle.clone()));
        let ctx = RunContext {
            run_id: run.id,
            attempt: run.attempt,
            cancel: handle.cancel.clone(),
            heartbeat_timeout: run.heartbeat_timeout,
            log,
        };
        let outcome = match self.registry.get(&run.executor) {
            Ok(executor) => {
                // A panicking executor (a library user's, or a bug) fails
                // its run; uncaught it would end this task with the run's
                // slot taken and its heartbeat going forever.
                let execution = futures_util::FutureExt::catch_unwind(
                    std::panic::AssertUnwindSafe(executor.execute(&run.executor, &ctx)),
                );
                tokio::pin!(execution);
                let left = (run.deadline.0 - Ts::now().0).to_std().unwrap_or_default();
                tokio::select! {
                    outcome = &mut execution => outcome.unwrap_or_else(|panic| {
                        let panic = super::panic_text(panic.as_ref());
                        tracing::error!(run_id = run.id, %panic, "an executor panicked");
                        Outcome::failed(None, format!("the executor panicked: {panic}"))
                    }),
                    _ = tokio::time::sleep(left) => {
                        handle.cancel.cancel();
                        match execution.await {
                            // It ended by itself as the deadline came.
                            Ok(outcome) if !outcome.interrupted => outcome,
                            _ => {
                                let timeout = (run.deadline.0 - run.started_at.0).to_std().unwrap_or_default();
                                Outcome::failed(None, format!("timed out after {}", humantime::format_duration(timeout)))
                            }
                        }
                    }
                }
            }
            Err(message) => Outcome::failed(None, message),
        };
        drop(ctx);
        // Every captured line is stored (or the run is known lost) before
        // the finish, so a DONE run's log is complete.
        let _ = writer.await;
        if handle.lost.load(Ordering::SeqCst) {
            tracing::warn!(
                run_id = run.id,
                "run lost to another actor; execution stopped, nothing written"
            );
            self.release(&[run.id]);
            return;
        }
        let canceling = handle.canceling.load(Ordering::SeqCst);
        // Only work that did not happen goes back: an execution that ended
        // by itself during the shutdown is recorded as it ended, and one an
        // operator canceled is recorded CANCELED.
        if handle.handing_back.load(Ordering::SeqCst) && outcome.interrupted && !canceling {
            self.handed.lock().expect("poisoned").push(run.id);
            self.release(&[run.id]);
            return;
        }
        // A cut-off stopped the execution; one that ended by itself first
        // keeps its own outcome (a command that exited 0 is DONE, not a
        // failure to be retried).
        let outcome = if handle.cut_off.load(Ordering::SeqCst) && outcome.interrupted {
            Outcome::failed(
                None,
                format!(
                    "stopped by replica {}: it could not reach the database to prove it still owned this run, so a retry elsewhere could not run beside it",
                    self.replica_id
                ),
            )
        } else {
            outcome
        };
        // The finish of a run asked to cancel is the kill's confirmation:
        // it ends CANCELED in the operator's name, unless the execution
        // succeeded first (the database decides, as the request may have
        // come after the last beat).
        let finish = Finish {
            run_id: run.id,
            status: match (outcome.success, canceling) {
                (true, _) => RunStatus::Done,
                (false, true) => RunStatus::Canceled,
                (false, false) => RunStatus::Failed,
            },
            result_code: outcome.result_code,
            // Executors build errors from program names and output: stored
            // as a log line would be (no NUL, bounded), or the finish batch
            // it rides in would fail on every retry.
            error: outcome.error.as_deref().map(output::clean_line),
        };
        // Queued before it counts as finishing: once no execution is
        // unfinished, the shutdown drains the queue, and must find it.
        if self.finishes.send(finish).is_err() {
            self.release(&[run.id]);
        }
        handle.finishing.store(true, Ordering::SeqCst);
        self.slot_freed.notify_one();
    }

    async fn write_logs(
        self: Arc<Self>,
        run_id: i64,
        mut lines: mpsc::UnboundedReceiver<LogLine>,
        handle: Arc<RunHandle>,
    ) {
        let mut batch = Vec::new();
        while lines.recv_many(&mut batch, LOG_BATCH).await > 0 {
            self.store_log_batch(run_id, &batch, &handle).await;
            batch.clear();
        }
    }

    /// Stores one batch of log lines, retrying through database outages
    /// (a restart, a failover) until it is stored or the run is lost: the
    /// log is part of the run and must not have holes. Lines keep arriving
    /// in the channel meanwhile.
    async fn store_log_batch(&self, run_id: i64, batch: &[LogLine], handle: &RunHandle) {
        let mut delay = Duration::from_millis(50);
        while !handle.lost.load(Ordering::SeqCst) {
            match self
                .store
                .run_log_append(&self.replica_id, run_id, batch)
                .await
            {
                Ok(true) => return,
                Ok(false) => handle.lose(run_id),
                Err(e) => {
                    tracing::warn!(run_id, error = %e, lines = batch.len(), "could not store log lines; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
            }
        }
    }

    fn release(&self, run_ids: &[i64]) {
        let mut running = self.running.lock().expect("poisoned");
        for id in run_ids {
            running.remove(id);
        }
        drop(running);
        self.slot_freed.notify_one();
        self.released.notify_one();
    }

    /// Stores finishes in batches and runs the run heartbeat, until
    /// shutdown (`shutdown`: claims have stopped); then waits for
    /// executions to end until the grace since `asked` (the signal) less
    /// its last words' reserve, stops the rest and hands their runs back.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken, asked: CancellationToken) {
        let Some(mut queue) = self.finish_queue.lock().expect("poisoned").take() else {
            return;
        };
        // Run heartbeats beat on their own: a finish that waits (on the
        // database, or on a lock a frozen replica holds) must not hold them
        // up, or the sweeper would fail the runs still executing here.
        let stop_beats = CancellationToken::new();
        let beats = tokio::spawn(self.run_heartbeat().run(stop_beats.clone()));
        let mut batch = Vec::new();
        let grace = async {
            asked.cancelled().await;
            self.last_words.end_by(Instant::now() + self.shutdown_grace);
            let executions = self.shutdown_grace - self.last_words.reserve();
            tokio::time::sleep(executions).await;
            // Claims stop long before (`drain_anyway`), but the drain must
            // have begun: runs a late claim adds are stopped too.
            shutdown.cancelled().await;
        };
        tokio::pin!(grace);
        let mut stopped_at: Option<Instant> = None;
        loop {
            if shutdown.is_cancelled() && self.running.lock().expect("poisoned").is_empty() {
                break;
            }
            // Past the grace, every execution ended: what is left is only
            // storing their finishes, which the last words below try.
            if stopped_at.is_some() && self.unfinished_ids().is_empty() {
                break;
            }
            if stopped_at.is_some_and(|at| at.elapsed() >= STOP_WAIT) {
                // Those finishing ended already: their finishes are stored
                // below, never handed back to run again.
                let left = self.unfinished_ids();
                tracing::error!(runs = ?left, "executions did not stop; handing their runs back anyway");
                self.handed.lock().expect("poisoned").extend(left);
                break;
            }
            tokio::select! {
                n = queue.recv_many(&mut batch, FINISH_BATCH) => {
                    if n == 0 { break; }
                    tokio::select! {
                        _ = self.store_finishes(&mut batch, &shutdown, None) => {}
                        // A write that hangs (the database gone) must not
                        // hold the stop up, nor the grace's end: the batch
                        // stays for the last drain, which is bounded.
                        _ = shutdown.cancelled(), if !shutdown.is_cancelled() => {}
                        _ = &mut grace, if stopped_at.is_none() => stopped_at = Some(self.stop_to_hand_back()),
                    }
                }
                _ = shutdown.cancelled(), if !shutdown.is_cancelled() => {}
                _ = &mut grace, if stopped_at.is_none() => stopped_at = Some(self.stop_to_hand_back()),
                _ = self.released.notified(), if shutdown.is_cancelled() => {}
                _ = tokio::time::sleep(Duration::from_millis(100)), if stopped_at.is_some() => {}
            }
        }
        // Finishes still queued are stored before the replica goes: each
        // is an execution that ended, which a hand-back or the sweeper
        // would otherwise run again. They and the hand-back share one
        // `LAST_WRITE`, so a stop with the database gone ends that long
        // after the executions, not that long for each write.
        let last_words = self.last_words.begin();
        while let Ok(finish) = queue.try_recv() {
            batch.push(finish);
        }
        if !batch.is_empty() {
            self.store_finishes(&mut batch, &shutdown, Some(last_words))
                .await;
        }
        // A beat in flight proves nothing now, and one to a database that
        // is gone never returns.
        stop_beats.cancel();
        beats.abort();
        let deadline = tokio::time::Instant::from_std(last_words);
        if tokio::time::timeout_at(deadline, self.hand_back(last_words))
            .await
            .is_err()
        {
            tracing::error!(
                "the database did not take the hand-back in time; the sweeper will resolve those runs"
            );
        }
    }

    /// The grace is over: stops every execution still running, for its
    /// run to be handed back. Returns when.
    fn stop_to_hand_back(&self) -> Instant {
        let left = self.running_ids();
        tracing::warn!(runs = ?left, grace = %humantime::format_duration(self.shutdown_grace),
            "shutdown grace period over; stopping executions to hand their runs back");
        for handle in self.running.lock().expect("poisoned").values() {
            handle.handing_back.store(true, Ordering::SeqCst);
            handle.cancel.cancel();
        }
        Instant::now()
    }

    /// When shutdown's last writes must be done by, once they begin.
    pub fn last_words(&self) -> LastWords {
        self.last_words.clone()
    }

    /// The runs executing here whose execution has not ended.
    fn unfinished_ids(&self) -> Vec<i64> {
        self.running
            .lock()
            .expect("poisoned")
            .iter()
            .filter(|(_, handle)| !handle.finishing.load(Ordering::SeqCst))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Returns the runs stopped by shutdown to AVAILABLE (same attempt),
    /// its last write done by `last_words`.
    async fn hand_back(&self, last_words: Instant) {
        let ids = std::mem::take(&mut *self.handed.lock().expect("poisoned"));
        if ids.is_empty() {
            return;
        }
        let detail = format!(
            "handed back by replica {} at shutdown: still running after the {} grace period",
            self.replica_id,
            humantime::format_duration(self.shutdown_grace)
        );
        match self
            .store
            .run_hand_back_many(&self.replica_id, &ids, &detail, Ts::now())
            .await
        {
            Ok(back) => {
                tracing::info!(runs = ?back, "handed runs back for another replica");
                self.confirm_cancels(&ids, &back, last_words).await;
            }
            Err(e) => tracing::error!(error = %e, runs = ?ids,
                "could not hand runs back; the sweeper will fail them once this replica is stale"),
        }
    }

    /// Runs a hand-back left RUNNING here were asked to cancel (after their
    /// last beat): their executions are stopped, so they end CANCELED now
    /// rather than wait for the sweeper. The finish is fenced, and the
    /// database turns it into the operator's cancel.
    async fn confirm_cancels(&self, asked: &[i64], back: &[i64], last_words: Instant) {
        let back: HashSet<i64> = back.iter().copied().collect();
        let mut left: Vec<Finish> = asked
            .iter()
            .filter(|id| !back.contains(id))
            .map(|&run_id| Finish {
                run_id,
                status: RunStatus::Canceled,
                result_code: None,
                error: Some(format!(
                    "stopped by replica {} at shutdown",
                    self.replica_id
                )),
            })
            .collect();
        if left.is_empty() {
            return;
        }
        let stopped = CancellationToken::new();
        stopped.cancel();
        self.store_finishes(&mut left, &stopped, Some(last_words))
            .await;
    }

    fn count_finishes(&self, batch: &[Finish], fenced: &[i64]) {
        let fenced: HashSet<i64> = fenced.iter().copied().collect();
        for finish in batch.iter().filter(|f| !fenced.contains(&f.run_id)) {
            self.counters.finished(finish.status);
        }
        self.counters.fenced(fenced.len());
    }

    /// Writes one batch of finishes, retrying until it is stored: a finish
    /// is never dropped while the replica runs. Once it is stopping, the
    /// tries end at `last_words`, else [`LAST_WRITE`] after the first, with
    /// the batch left as it was (the last drain tries it again; past that,
    /// the sweeper resolves it).
    async fn store_finishes(
        &self,
        batch: &mut Vec<Finish>,
        shutdown: &CancellationToken,
        last_words: Option<Instant>,
    ) {
        let mut delay = Duration::from_millis(50);
        let began = Instant::now();
        let until = last_words.unwrap_or(began + LAST_WRITE);
        loop {
            // Shutting down, a database that is gone gets until `until`
            // from the first try, and the batch stays for the last drain.
            let left = until.saturating_duration_since(Instant::now());
            let unrecorded = crate::faults::finishes_unrecorded_for()
                .is_some_and(|unrecorded| began.elapsed() < unrecorded);
            let write = self
                .store
                .run_finish_many(&self.replica_id, batch, Ts::now());
            let written = if unrecorded {
                drop(write);
                Err(StoreError::Database(sqlx::Error::PoolTimedOut))
            } else if shutdown.is_cancelled() {
                match tokio::time::timeout(left, write).await {
                    Ok(written) => written,
                    Err(_) => {
                        tracing::error!(
                            runs = batch.len(),
                            "the database did not take these finishes in time; leaving them to the sweeper"
                        );
                        return;
                    }
                }
            } else {
                write.await
            };
            match written {
                Ok(report) => {
                    tracing::debug!(
                        runs = batch.len(),
                        took_us = began.elapsed().as_micros() as u64,
                        "finish batch stored"
                    );
                    if !report.notified.is_empty() && crate::faults::exit_after_notification_claim()
                    {
                        crate::faults::die_now("a notification was just claimed");
                    }
                    if !report.fenced.is_empty() {
                        tracing::info!(runs = ?report.fenced, "finished runs were no longer ours; not recorded");
                    }
                    if !report.succeeded_late.is_empty() {
                        tracing::warn!(
                            runs = ?report.succeeded_late,
                            "commands exited 0 after their runs were failed (this replica could not \
                             prove it was alive in time); noted on the runs, whose retries may have run them again"
                        );
                    }
                    self.count_finishes(batch, &report.fenced);
                    let ids: Vec<i64> = batch.iter().map(|f| f.run_id).collect();
                    batch.clear();
                    self.release(&ids);
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, runs = batch.len(), "could not store finished runs; retrying");
                    if shutdown.is_cancelled() && Instant::now() + delay >= until {
                        return;
                    }
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
            }
        }
    }
}
