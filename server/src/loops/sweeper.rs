//! The sweeper (docs/design.md, "Liveness"), run by the leader: fails
//! RUNNING runs whose replica went quiet or whose deadlines passed, so
//! nothing stays RUNNING on a dead replica; drops the pins of AVAILABLE
//! runs whose node is gone, so nothing stays AVAILABLE for a claimer that
//! never comes; and prunes heartbeat rows of replicas long gone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::{Leadership, round_interval};
use crate::loops::{Probe, WriteTrouble};
use crate::store::{SWEEP_BLOCKED_AFTER, Store, StoreError, SweepReport};
use domain::time::Ts;

/// Heartbeat rows older than this are deleted.
pub const PRUNE_AFTER: Duration = Duration::from_secs(60 * 60);
/// How often the leader looks for such rows.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

pub struct Sweeper {
    store: Arc<dyn Store>,
    leadership: Leadership,
    interval: Duration,
    stale_after: Duration,
    probe: Probe,
    /// When this replica last saw the database refuse or hold up a write
    /// (a round that failed or waited for its table locks, a heartbeat):
    /// the next round that judges writes off the stretch since the last
    /// good one, whoever led then (`store::engine::sweep_memory`).
    trouble: WriteTrouble,
}

impl Sweeper {
    pub fn new(
        store: Arc<dyn Store>,
        leadership: Leadership,
        interval: Duration,
        stale_after: Duration,
    ) -> Self {
        Sweeper {
            store,
            leadership,
            interval,
            stale_after,
            probe: Probe::detached(),
            trouble: WriteTrouble::default(),
        }
    }

    /// Shares `trouble` with the replica's heartbeat.
    pub fn noting_trouble(mut self, trouble: WriteTrouble) -> Self {
        self.trouble = trouble;
        self
    }

    /// Reports each round to `probe` (for `/readyz`).
    pub fn reporting_to(mut self, probe: Probe) -> Self {
        self.probe = probe;
        self
    }

    pub async fn run_once(&mut self) -> anyhow::Result<SweepReport> {
        let report = match self
            .store
            .run_sweep(self.stale_after, self.trouble.latest(), Ts::now())
            .await
        {
            Ok(report) => report,
            Err(e) => {
                self.trouble.seen();
                return Err(e.into());
            }
        };
        if let Some(waited) = report.blocked {
            self.trouble.seen();
            tracing::warn!(
                waited = %humantime::format_duration(waited),
                "the sweep waited for its table locks (heartbeats were kept waiting too); judging nothing this round"
            );
            return Ok(report);
        }
        if let Some(stretch) = report.written_off {
            tracing::warn!(
                stretch = %humantime::format_duration(stretch),
                "sweeps could not judge for a while; for the next stale period verdicts \
                 discount that stretch, in which heartbeats could not be written either"
            );
        }
        for (run_id, cause) in &report.failed {
            tracing::warn!(run_id, %cause, "swept a run: FAILED");
        }
        for (run_id, cause) in &report.canceled {
            tracing::warn!(run_id, %cause, "swept a run asked to cancel: CANCELED");
        }
        let unpinned = self
            .held_up_is_trouble(self.store.run_unpin_stranded(self.stale_after, Ts::now()))
            .await?;
        for run_id in unpinned {
            tracing::warn!(
                run_id,
                "an AVAILABLE run lost its pin: no live replica carries its node label"
            );
        }
        Ok(report)
    }

    /// Runs one of the round's other statements. One that failed, or was
    /// held up by a lock (an outside `LOCK TABLE`) as long as a sweep that
    /// judges nothing, is trouble like such a sweep: the round after it
    /// may come the moment the lock goes, before the heartbeats that
    /// waited behind the same lock are written, and must write the
    /// stretch off. (The unpinning read once waited out a whole table
    /// lock between two sweeps that both judged, and the second failed
    /// every run whose heartbeat had waited.)
    async fn held_up_is_trouble<T>(
        &self,
        statement: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let asked = Instant::now();
        let answer = statement.await;
        if answer.is_err() || asked.elapsed() > SWEEP_BLOCKED_AFTER {
            self.trouble.seen();
        }
        answer
    }

    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut tick = round_interval(self.interval);
        let mut pruned_at: Option<Instant> = None;
        while self
            .leadership
            .next_round(&mut tick, &self.probe, &shutdown)
            .await
        {
            let outcome = self.run_once().await;
            self.probe.ended("sweep", &outcome);
            if pruned_at.is_none_or(|at| at.elapsed() >= PRUNE_EVERY) {
                pruned_at = Some(Instant::now());
                let pruned = self.store.replica_prune(Ts::now().minus(PRUNE_AFTER));
                match self.held_up_is_trouble(pruned).await {
                    Ok(0) => {}
                    Ok(n) => {
                        tracing::info!(pruned = n, "removed heartbeat rows older than an hour")
                    }
                    Err(e) => tracing::warn!(error = %e, "pruning heartbeat rows failed"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use sqlx::{Connection, PgConnection};

    use super::*;
    use crate::bench::scratch::Scratch;
    use crate::loops::leader::LeaderLease;
    use crate::store::PgStore;

    /// A round whose sweep judged but whose unpinning read was then held
    /// up by an outside lock (on `available_run`, which the sweep does not
    /// need) notes trouble, so the next round writes the stretch off.
    #[tokio::test]
    async fn a_round_held_up_after_its_sweep_is_trouble() {
        let scratch = Scratch::postgres_for_tests().await;
        let store = PgStore::connect(&scratch.url).await.expect("connect");
        store.migrate().await.expect("migrate");
        let store: Arc<dyn Store> = Arc::new(store);
        let (_lease, leadership) = LeaderLease::new(store.clone(), "r-1".into(), SECOND * 6);
        let trouble = WriteTrouble::default();
        let mut sweeper = Sweeper::new(store.clone(), leadership, SECOND, SECOND * 10)
            .noting_trouble(trouble.clone());
        sweeper.run_once().await.expect("a quiet round");
        assert_eq!(trouble.latest(), None, "nothing held it up");

        let mut outsider = PgConnection::connect(&scratch.url).await.expect("connect");
        sqlx::raw_sql("BEGIN; LOCK TABLE available_run IN ACCESS EXCLUSIVE MODE")
            .execute(&mut outsider)
            .await
            .expect("the outside lock");
        let release = tokio::spawn(async move {
            tokio::time::sleep(SECOND / 2).await;
            sqlx::raw_sql("ROLLBACK")
                .execute(&mut outsider)
                .await
                .expect("release");
        });
        let report = sweeper.run_once().await.expect("a held-up round");
        assert_eq!(report.blocked, None, "the sweep itself was not held up");
        assert!(
            trouble.latest().is_some(),
            "the held-up unpinning is trouble"
        );
        release.await.expect("join");
        drop(sweeper);
        drop(store);
        scratch.drop_database().await.expect("drop");
    }

    const SECOND: Duration = Duration::from_secs(1);
}
