//! Promotes PENDING runs whose gates all pass (SPEC §3).
//!
//! Only the leader runs rounds. The store still lets one round run at a
//! time (advisory lock on PostgreSQL, the write lock on SQLite), which keeps
//! promotion safe during a change of leader, when an old leader's last round
//! may overlap the new leader's first.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::SchedulerConfig;
use super::health::Probe;
use crate::liveness::Leadership;
use crate::store::{NodeLabels, PromoteReport, Store, Ts};

pub struct Promoter {
    store: Arc<dyn Store>,
    leadership: Leadership,
    poll_interval: Duration,
    stale_after: Duration,
    /// Node labels of live replicas, refreshed at most every heartbeat.
    nodes: Option<(Instant, NodeLabels)>,
    nodes_max_age: Duration,
    probe: Probe,
}

impl Promoter {
    pub fn new(store: Arc<dyn Store>, leadership: Leadership, config: &SchedulerConfig) -> Self {
        Promoter {
            store,
            leadership,
            poll_interval: config.poll_interval,
            stale_after: config.stale_after,
            nodes: None,
            nodes_max_age: config.heartbeat_interval,
            probe: Probe::detached(),
        }
    }

    /// Reports each round to `probe` (for `/readyz`).
    pub fn reporting_to(mut self, probe: Probe) -> Self {
        self.probe = probe;
        self
    }

    pub async fn run_once(&mut self) -> anyhow::Result<PromoteReport> {
        let now = Ts::now();
        let fresh = matches!(&self.nodes, Some((at, _)) if at.elapsed() < self.nodes_max_age);
        if !fresh {
            let labels = NodeLabels::read(self.store.as_ref(), self.stale_after, now).await?;
            self.nodes = Some((Instant::now(), labels));
        }
        let nodes = &self.nodes.as_ref().expect("just set").1;
        let report = self.store.run_promote_round(nodes, now).await?;
        if report.promoted > 0 {
            tracing::debug!(
                promoted = report.promoted,
                waiting = report.waiting,
                "promoted runs"
            );
        }
        Ok(report)
    }

    pub async fn run(mut self, shutdown: CancellationToken) {
        let signals = self.store.signals().clone();
        loop {
            if !self.leadership.is_leader() {
                self.probe.idle();
                let mut leadership = self.leadership.clone();
                tokio::select! {
                    _ = leadership.until_leading() => {}
                    _ = shutdown.cancelled() => return,
                }
            }
            if crate::faults::panic_in_promoter() {
                panic!("BATON_FAULT=panic-in-promoter");
            }
            match self.run_once().await {
                Ok(_) => self.probe.round_done(),
                Err(e) => {
                    tracing::warn!(error = %e, "promotion round failed; will retry");
                    self.probe.round_failed(&e);
                }
            }
            tokio::select! {
                _ = signals.changed.notified() => {}
                _ = tokio::time::sleep(self.poll_interval) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }
}
