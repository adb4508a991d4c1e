//! Keeps this replica's clock anchored on the database's
//! ([`crate::store::clock`], first anchored when the store connected)
//! every heartbeat interval. Says so in the log when the host's own clock
//! is off by more than [`SKEW_WARNING`], and again when it is back in step.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::loops::Probe;
use crate::store::Store;
use crate::store::clock::sample;
use domain::time::clock::{self, Adopted, SKEW_WARNING};

pub struct ClockSync {
    store: Arc<dyn Store>,
    interval: Duration,
    probe: Probe,
    /// Whether the last sample found the host's clock off (for logging
    /// changes only, not every round).
    skewed: AtomicBool,
}

impl ClockSync {
    pub fn new(store: Arc<dyn Store>, interval: Duration) -> Self {
        ClockSync {
            store,
            interval,
            probe: Probe::detached(),
            skewed: AtomicBool::new(false),
        }
    }

    /// Reports each sample to `probe` (for `/readyz`).
    pub fn reporting_to(mut self, probe: Probe) -> Self {
        self.probe = probe;
        self
    }

    /// One sample, adopted where it tells more than the anchor held.
    pub async fn run_once(&self) -> anyhow::Result<()> {
        let Some(sample) = sample(self.store.as_ref()).await? else {
            return Ok(());
        };
        if let Adopted::Moved(by) = clock::adopt(&sample)
            && by.abs() > chrono::TimeDelta::milliseconds(100)
        {
            tracing::warn!(
                moved_ms = by.num_milliseconds(),
                "re-anchored on the database's clock: it moved against this process's \
                 monotonic clock (the database's clock was stepped, or this VM was suspended)"
            );
        }
        self.report_skew();
        Ok(())
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let mut tick = super::round_interval(self.interval);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.cancelled() => return,
            }
            let outcome = self.run_once().await;
            self.probe.ended("reading the database's clock", &outcome);
        }
    }

    /// Logs a change of the host's skew.
    fn report_skew(&self) {
        let skew = clock::skew();
        let notable = clock::skew_is_notable(skew);
        if self.skewed.swap(notable, Ordering::Relaxed) == notable {
            return;
        }
        if notable {
            tracing::warn!(
                skew_ms = skew.num_milliseconds(),
                "this host's clock is {} the database's; Baton keeps to the database's \
                 clock, but commands run here see the host's (limit {} ms)",
                domain::model::describe_clock_skew(skew.num_milliseconds()),
                SKEW_WARNING.as_millis()
            );
        } else {
            tracing::info!(
                skew_ms = skew.num_milliseconds(),
                "this host's clock agrees with the database's again"
            );
        }
    }
}
