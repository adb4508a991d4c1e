//! Each executing run's own heartbeat (docs/design.md, "Liveness"): every
//! run is beaten on its own interval (the task's `heartbeat_interval`, else
//! the replica's), all runs due in one fenced UPDATE that skips rows
//! another transaction holds (those are beaten again shortly); a run the
//! database no longer has RUNNING on this replica is lost and its execution
//! stopped. It beats in a loop of its own, so a finish that waits (on the
//! database, or on a lock a frozen replica holds) cannot hold the beats up
//! until the sweeper fails runs still executing here.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::RunLedger;
use super::ownership::Ownership;
use crate::store::StoreError;
use domain::time::Ts;

/// Between attempts after a failed beat: short against the runs'
/// heartbeat timeouts (seconds), long against a refused connection.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The runs this replica executes, by id: shared by the worker (which
/// adds and releases them) and the run heartbeat.
pub type RunTable = Arc<Mutex<HashMap<i64, Arc<RunHandle>>>>;

/// A run this replica executes: how to stop it, why it stopped, and what
/// proves this replica still owns it.
pub struct RunHandle {
    pub cancel: CancellationToken,
    /// The replica no longer owns the run: write nothing more.
    pub lost: AtomicBool,
    /// Stopped by shutdown: hand the run back instead of failing it.
    pub handing_back: AtomicBool,
    /// An operator asked to cancel the run: its execution is stopped and
    /// its finish records it CANCELED (docs/design.md, "Operator actions").
    pub canceling: AtomicBool,
    /// Stopped because this replica could no longer prove it owns its
    /// runs (no heartbeat recorded for 3/4 of `stale_after`).
    pub cut_off: AtomicBool,
    /// The execution ended and its finish is on its way. The run is still
    /// beaten until the finish is stored: a finish retried through killed
    /// connections or held up by a lock must not let the sweeper fail a
    /// command that already succeeded (and run it again).
    pub finishing: AtomicBool,
    pub beat_every: Duration,
    pub beat_timeout: Duration,
    pub next_beat: Mutex<Instant>,
    /// When the last run heartbeat that was recorded was sent (at first,
    /// the claim): the sweeper may fail the run `beat_timeout` after it.
    pub proven_at: Mutex<Instant>,
    /// When the claim that took the run was sent (or, for a run taken
    /// through a replica, proven): the replica's own proof must have held
    /// ever since.
    pub claimed_at: Instant,
}

impl RunHandle {
    /// Still this replica's to run: not lost, and not over.
    pub fn executing(&self) -> bool {
        self.owned() && !self.finishing.load(Ordering::SeqCst)
    }

    /// Still this replica's as far as it knows: executing, or ended with
    /// its finish not yet stored. Such a run needs its heartbeat.
    pub fn owned(&self) -> bool {
        !self.lost.load(Ordering::SeqCst)
    }

    /// After this the run's heartbeat may have lapsed in the database: the
    /// execution stops before, with a quarter of the timeout to spare.
    pub fn proven_until(&self) -> Instant {
        *self.proven_at.lock().expect("poisoned") + self.beat_timeout * 3 / 4
    }

    /// Whether this replica can no longer be sure the run is its own, so
    /// that the sweeper may have failed it and started its retry
    /// elsewhere: the run's own heartbeat went unrecorded too long, or the
    /// replica's proof lapsed at any moment since the claim. A lapse that
    /// has already ended still counts: a late heartbeat answer proves the
    /// replica alive now, not that its runs were never swept meanwhile.
    pub fn unproven(&self, replica: &Ownership, now: Instant) -> bool {
        self.proven_until() <= now || !replica.unbroken_since(self.claimed_at)
    }

    /// Stops the execution of a run an operator asked to cancel; the run
    /// is still this replica's, and its finish confirms the kill.
    pub fn cancel_requested(&self, run_id: i64) {
        if !self.canceling.swap(true, Ordering::SeqCst) {
            tracing::info!(run_id, "cancel requested; stopping the execution");
        }
        self.cancel.cancel();
    }

    /// Marks the run lost to another actor (a cancel, a sweep, a takeover)
    /// and stops its execution; nothing more is written to it.
    pub fn lose(&self, run_id: i64) {
        if !self.lost.swap(true, Ordering::SeqCst) {
            tracing::info!(run_id, "run no longer owned by this replica; stopping it");
        }
        self.cancel.cancel();
    }
}

/// Beats the runs of one replica's [`RunTable`].
pub struct RunHeartbeat {
    store: Arc<dyn RunLedger>,
    replica_id: String,
    heartbeat_interval: Duration,
    running: RunTable,
}

impl RunHeartbeat {
    pub fn new(
        store: Arc<dyn RunLedger>,
        replica_id: String,
        heartbeat_interval: Duration,
        running: RunTable,
    ) -> Self {
        RunHeartbeat {
            store,
            replica_id,
            heartbeat_interval,
            running,
        }
    }

    /// Beats each run on its interval, and every run at once when a cancel
    /// may have asked for one of them (or a sweep taken one).
    pub async fn run(self, stop: CancellationToken) {
        let canceled = self.store.signals().clone();
        loop {
            let beat_at = tokio::time::Instant::from_std(self.next_beat());
            tokio::select! {
                _ = tokio::time::sleep_until(beat_at) => self.beat(false).await,
                _ = canceled.canceled.notified() => self.beat(true).await,
                _ = stop.cancelled() => return,
            }
        }
    }

    /// Extends the heartbeat deadline of the runs due for a beat (every run
    /// when `all`) and stops those this replica no longer owns. Returns how
    /// many were lost.
    pub async fn beat_once(&self, all: bool) -> Result<usize, StoreError> {
        let now = Instant::now();
        let handles: Vec<(i64, Arc<RunHandle>)> = self
            .running
            .lock()
            .expect("poisoned")
            .iter()
            .filter(|(_, h)| h.owned())
            .filter(|(_, h)| all || *h.next_beat.lock().expect("poisoned") <= now)
            .map(|(id, h)| (*id, h.clone()))
            .collect();
        if handles.is_empty() {
            return Ok(0);
        }
        // Counted from before the write, as the database stamps it.
        let sent = Instant::now();
        let beats: Vec<(i64, Duration)> = handles
            .iter()
            .map(|(id, h)| (*id, h.beat_timeout))
            .collect();
        let beaten = match self
            .store
            .run_heartbeat_many(&self.replica_id, &beats, Ts::now())
            .await
        {
            Ok(beaten) => beaten,
            // Held up by another client's table lock: as good as recorded
            // (the sweeper cannot take that lock either), and sent again
            // at once, to wait in the lock's queue.
            Err(e) => {
                if e.is_lock_wait() {
                    for (_, handle) in &handles {
                        *handle.proven_at.lock().expect("poisoned") = sent;
                    }
                }
                return Err(e);
            }
        };
        let canceling: HashSet<i64> = beaten.canceling.into_iter().collect();
        let owned: HashSet<i64> = beaten.owned.into_iter().chain(canceling.clone()).collect();
        let held: HashSet<i64> = beaten.held.into_iter().collect();
        let mut lost = 0;
        for (id, handle) in handles {
            if held.contains(&id) {
                // Its row is held elsewhere, from the sweeper too: proven,
                // as by a table lock, and at once again, to stay first in
                // the row's lock queue.
                *handle.proven_at.lock().expect("poisoned") = sent;
                *handle.next_beat.lock().expect("poisoned") = now;
                continue;
            }
            *handle.next_beat.lock().expect("poisoned") = now + handle.beat_every;
            if owned.contains(&id) {
                *handle.proven_at.lock().expect("poisoned") = sent;
            }
            if canceling.contains(&id) {
                handle.cancel_requested(id);
            }
            // A run whose finish was stored meanwhile is not RUNNING either;
            // it is already released or about to be, and losing it is moot.
            // So is a finishing run taken meanwhile: nothing executes, and
            // its fenced finish will not be recorded.
            if !owned.contains(&id)
                && !handle.finishing.load(Ordering::SeqCst)
                && self.running.lock().expect("poisoned").contains_key(&id)
            {
                handle.lose(id);
                lost += 1;
            }
        }
        Ok(lost)
    }

    /// When the next run is due for a beat (at most one replica interval
    /// away, so new runs are picked up).
    fn next_beat(&self) -> Instant {
        next_due(&self.running, Instant::now() + self.heartbeat_interval)
    }

    async fn beat(&self, all: bool) {
        match self.beat_once(all).await {
            Ok(0) => {}
            Ok(lost) => tracing::info!(lost, "stopped runs this replica no longer owns"),
            Err(e) if e.is_lock_wait() => {
                tracing::debug!(
                    "run heartbeat held up by a lock another client holds; asking again"
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, "run heartbeat failed; will retry");
                // The runs' beats stay overdue, so without a pause the loop
                // would retry at once, as fast as a database that refuses
                // connections answers (a restart, a failover).
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

/// The earliest beat due among the runs this replica still owns, or `cap`.
///
/// Only runs [`beat_once`](RunHeartbeat::beat_once) would beat count: a
/// lost run stays in the table until its finish is fenced, which can take
/// long when the database is slow or gone; counting its overdue beat made
/// the loop wake at once, find nothing to beat, and spin on a core until
/// then.
fn next_due(running: &RunTable, cap: Instant) -> Instant {
    running
        .lock()
        .expect("poisoned")
        .values()
        .filter(|h| h.owned())
        .map(|h| *h.next_beat.lock().expect("poisoned"))
        .min()
        .map_or(cap, |due| due.min(cap))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(next_beat: Instant) -> Arc<RunHandle> {
        Arc::new(RunHandle {
            cancel: CancellationToken::new(),
            lost: AtomicBool::new(false),
            handing_back: AtomicBool::new(false),
            canceling: AtomicBool::new(false),
            cut_off: AtomicBool::new(false),
            finishing: AtomicBool::new(false),
            beat_every: Duration::from_secs(1),
            beat_timeout: Duration::from_secs(10),
            next_beat: Mutex::new(next_beat),
            proven_at: Mutex::new(next_beat),
            claimed_at: next_beat,
        })
    }

    #[test]
    fn lost_runs_do_not_make_the_loop_spin() {
        let now = Instant::now();
        let cap = now + Duration::from_secs(2);
        let overdue = now - Duration::from_secs(5);
        let table: RunTable = Arc::default();
        let lost = handle(overdue);
        lost.lost.store(true, Ordering::SeqCst);
        table.lock().unwrap().insert(2, lost);
        assert_eq!(next_due(&table, cap), cap, "a lost run waits for no beat");

        let soon = now + Duration::from_millis(300);
        table.lock().unwrap().insert(3, handle(soon));
        assert_eq!(
            next_due(&table, cap),
            soon,
            "an executing run's beat is next"
        );
        table.lock().unwrap().insert(4, handle(overdue));
        assert_eq!(
            next_due(&table, cap),
            overdue,
            "an overdue executing run is beaten at once"
        );
    }

    #[test]
    fn a_run_whose_finish_is_on_its_way_is_still_beaten() {
        let now = Instant::now();
        let cap = now + Duration::from_secs(2);
        let due = now + Duration::from_millis(300);
        let table: RunTable = Arc::default();
        let finishing = handle(due);
        finishing.finishing.store(true, Ordering::SeqCst);
        table.lock().unwrap().insert(1, finishing);
        assert_eq!(
            next_due(&table, cap),
            due,
            "until its finish is stored, the sweeper may still fail it"
        );
    }

    /// The predicate both the spawn and the ownership watcher stop runs
    /// by: a lapse of the replica's proof since the claim counts even once
    /// a later heartbeat has ended it.
    #[test]
    fn a_run_claimed_before_a_lapse_stays_unproven_after_it() {
        let replica = Ownership::new(Duration::from_millis(40));
        let run = handle(Instant::now());
        assert!(!run.unproven(&replica, Instant::now()), "just claimed");
        std::thread::sleep(Duration::from_millis(50));
        assert!(run.unproven(&replica, Instant::now()), "the proof lapsed");
        replica.proven(Instant::now());
        assert!(replica.provable(), "a late answer proves the replica alive");
        assert!(
            run.unproven(&replica, Instant::now()),
            "the sweeper may have failed the run during the lapse"
        );
        let claimed_after = handle(Instant::now());
        assert!(!claimed_after.unproven(&replica, Instant::now()));

        let nine_ago = Instant::now()
            .checked_sub(Duration::from_secs(9))
            .expect("uptime");
        let beat_lapsed = handle(nine_ago);
        assert!(
            beat_lapsed.unproven(&replica, Instant::now()),
            "its own heartbeat went unrecorded for 9 of its 10 s"
        );
    }
}
