//! Where a worker claims its runs and records what they did: the database
//! for a replica, a replica's worker protocol for an agent
//! (docs/agents.md). The worker, its run heartbeat, its claimer and its
//! own heartbeat speak only this, so an agent executes, beats, fences and
//! cuts itself off with exactly the code a replica runs.

use std::sync::Arc;
use std::time::Duration;

use crate::store::{
    Beaten, Claim, ClaimedRun, Finish, FinishReport, LogLine, ReplicaInfo, Result, Signals, Store,
};
use domain::time::Ts;

/// The writes one worker makes, each fenced by its worker id (a replica's
/// or an agent's): a write for a run that is no longer RUNNING under that
/// id changes nothing and says so.
#[async_trait::async_trait]
pub trait RunLedger: Send + Sync + 'static {
    /// Wake-ups for the claimer (runs became AVAILABLE) and the run
    /// heartbeat (a run was asked to cancel).
    fn signals(&self) -> &Arc<Signals>;
    /// Claims up to `claim.limit` AVAILABLE runs the worker may execute.
    async fn run_claim_many(&self, claim: &Claim<'_>, now: Ts) -> Result<Vec<ClaimedRun>>;
    /// From when the runs of the last claim, sent at `sent`, are proven
    /// to be this worker's: a database claim stamps their deadlines with
    /// its own statement, so from `sent`; a take that waited at a replica
    /// for runs, from the beat that confirmed them after it returned.
    fn claim_proven_from(&self, sent: std::time::Instant) -> std::time::Instant {
        sent
    }
    /// Records how executions ended, creating automatic retries.
    async fn run_finish_many(
        &self,
        worker_id: &str,
        finishes: &[Finish],
        now: Ts,
    ) -> Result<FinishReport>;
    /// Extends the heartbeat deadline of the worker's runs.
    async fn run_heartbeat_many(
        &self,
        worker_id: &str,
        beats: &[(i64, Duration)],
        now: Ts,
    ) -> Result<Beaten>;
    /// Appends log lines; false when the worker lost the run.
    async fn run_log_append(&self, worker_id: &str, run_id: i64, lines: &[LogLine])
    -> Result<bool>;
    /// Returns runs to AVAILABLE (same attempt); which went back.
    async fn run_hand_back_many(
        &self,
        worker_id: &str,
        run_ids: &[i64],
        detail: &str,
        now: Ts,
    ) -> Result<Vec<i64>>;
    /// The worker's own heartbeat: its row says it is alive, with labels.
    /// Answers whether an operator drains the worker.
    async fn replica_upsert(&self, info: &ReplicaInfo, now: Ts) -> Result<bool>;
    /// Removes the worker's row as it leaves.
    async fn replica_delete(&self, worker_id: &str) -> Result<()>;
}

/// A replica's ledger: its own database.
pub struct DatabaseLedger(pub Arc<dyn Store>);

impl DatabaseLedger {
    pub fn over(store: Arc<dyn Store>) -> Arc<dyn RunLedger> {
        Arc::new(DatabaseLedger(store))
    }
}

#[async_trait::async_trait]
impl RunLedger for DatabaseLedger {
    fn signals(&self) -> &Arc<Signals> {
        self.0.signals()
    }

    async fn run_claim_many(&self, claim: &Claim<'_>, now: Ts) -> Result<Vec<ClaimedRun>> {
        self.0.run_claim_many(claim, now).await
    }

    async fn run_finish_many(
        &self,
        worker_id: &str,
        finishes: &[Finish],
        now: Ts,
    ) -> Result<FinishReport> {
        self.0.run_finish_many(worker_id, finishes, now).await
    }

    async fn run_heartbeat_many(
        &self,
        worker_id: &str,
        beats: &[(i64, Duration)],
        now: Ts,
    ) -> Result<Beaten> {
        self.0.run_heartbeat_many(worker_id, beats, now).await
    }

    async fn run_log_append(
        &self,
        worker_id: &str,
        run_id: i64,
        lines: &[LogLine],
    ) -> Result<bool> {
        self.0.run_log_append(worker_id, run_id, lines).await
    }

    async fn run_hand_back_many(
        &self,
        worker_id: &str,
        run_ids: &[i64],
        detail: &str,
        now: Ts,
    ) -> Result<Vec<i64>> {
        self.0
            .run_hand_back_many(worker_id, run_ids, detail, now)
            .await
    }

    async fn replica_upsert(&self, info: &ReplicaInfo, now: Ts) -> Result<bool> {
        self.0.replica_upsert(info, now).await
    }

    async fn replica_delete(&self, worker_id: &str) -> Result<()> {
        self.0.replica_delete(worker_id).await
    }
}
