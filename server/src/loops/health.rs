//! Whether each of a replica's loops is still completing rounds, for
//! `/readyz`.
//!
//! A loop that fails every round (a query the database refuses each time)
//! or that died looks, from outside, exactly like a healthy idle one: the
//! process answers, the lease may even be held. Each loop therefore reports
//! every round through a [`Probe`]; one that has not completed a round for
//! twice its interval plus a margin, or that crashed, is *stalled*, and the
//! replica stops reporting ready so a load balancer or orchestrator sees it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

/// Slack on top of two intervals before a loop counts as stalled: one slow
/// database answer must not flap readiness.
const MARGIN: Duration = Duration::from_secs(5);

/// Every loop of one replica.
#[derive(Debug, Default)]
pub struct LoopHealth {
    loops: Mutex<BTreeMap<&'static str, LoopState>>,
}

#[derive(Debug)]
struct LoopState {
    /// The longest a healthy loop goes between rounds.
    interval: Duration,
    /// The last completed round, or when the loop last had nothing it was
    /// expected to do (a follower's promoter).
    last_round: Instant,
    last_error: Option<String>,
    crashed: Option<String>,
    /// Nothing expected of it until further notice (not the leader).
    idle: bool,
}

/// A loop that is not completing rounds, as `/readyz` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stalled {
    #[serde(rename = "loop")]
    pub name: &'static str,
    /// Seconds since its last completed round.
    pub since_secs: u64,
    /// Its last error, or the panic that ended it.
    pub error: Option<String>,
}

impl LoopHealth {
    pub fn new() -> Arc<Self> {
        Arc::new(LoopHealth::default())
    }

    /// Registers a loop that completes a round at least every `interval`.
    pub fn probe(self: &Arc<Self>, name: &'static str, interval: Duration) -> Probe {
        self.loops.lock().expect("health lock").insert(
            name,
            LoopState {
                interval,
                last_round: Instant::now(),
                last_error: None,
                crashed: None,
                idle: false,
            },
        );
        Probe {
            health: Some(self.clone()),
            name,
        }
    }

    /// The loops that crashed or have not completed a round in time.
    pub fn stalled(&self) -> Vec<Stalled> {
        let loops = self.loops.lock().expect("health lock");
        loops
            .iter()
            .filter_map(|(name, state)| {
                let since = state.last_round.elapsed();
                let late = !state.idle && since > state.interval * 2 + MARGIN;
                (late || state.crashed.is_some()).then(|| Stalled {
                    name,
                    since_secs: since.as_secs(),
                    error: state.crashed.clone().or_else(|| state.last_error.clone()),
                })
            })
            .collect()
    }

    fn update(&self, name: &'static str, change: impl FnOnce(&mut LoopState)) {
        if let Some(state) = self.loops.lock().expect("health lock").get_mut(name) {
            change(state);
        }
    }
}

/// One loop's reporting handle. [`Probe::detached`] reports nowhere, for
/// loops started on their own (tests, benchmarks).
#[derive(Debug, Clone)]
pub struct Probe {
    health: Option<Arc<LoopHealth>>,
    name: &'static str,
}

impl Probe {
    pub fn detached() -> Self {
        Probe {
            health: None,
            name: "detached",
        }
    }

    /// A round finished (including one that found nothing to do).
    pub fn round_done(&self) {
        self.set(|state| {
            state.last_round = Instant::now();
            state.last_error = None;
            state.idle = false;
        });
    }

    /// A round failed; the loop goes on, but the clock keeps running.
    pub fn round_failed(&self, error: &anyhow::Error) {
        let error = format!("{error:#}");
        self.set(|state| {
            state.last_error = Some(error);
            state.idle = false;
        });
    }

    /// A round of `what` ended with `outcome`: recorded, and a failure
    /// logged (`"{what} failed; will retry"`). Every loop's round ends here,
    /// so a loop cannot fail quietly or forget to tell `/readyz`.
    pub fn ended<T>(&self, what: &str, outcome: &anyhow::Result<T>) {
        match outcome {
            Ok(_) => self.round_done(),
            Err(error) => {
                tracing::warn!(error = %error, "{what} failed; will retry");
                self.round_failed(error);
            }
        }
    }

    /// The loop has nothing it is expected to do until its next round
    /// (a follower waiting for leadership), which is as healthy as a
    /// completed round for as long as it lasts.
    pub fn idle(&self) {
        self.set(|state| {
            state.last_error = None;
            state.idle = true;
        });
    }

    /// The loop ended by panicking.
    pub fn crashed(&self, panic: String) {
        self.set(|state| state.crashed = Some(panic));
    }

    fn set(&self, change: impl FnOnce(&mut LoopState)) {
        if let Some(health) = &self.health {
            health.update(self.name, change);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_that_keeps_failing_is_stalled_with_its_error() {
        let health = LoopHealth::new();
        let claimer = health.probe("claimer", Duration::ZERO);
        let promoter = health.probe("promoter", Duration::from_secs(3600));
        assert!(health.stalled().is_empty(), "fresh loops get their margin");
        claimer.round_failed(&anyhow::anyhow!("interval out of range"));
        let long_ago = |s: &mut LoopState| {
            s.last_round = s.last_round.checked_sub(MARGIN * 2).expect("uptime");
        };
        health.update("claimer", long_ago);
        let stalled = health.stalled();
        assert_eq!(stalled.len(), 1);
        assert_eq!(stalled[0].name, "claimer");
        assert_eq!(stalled[0].error.as_deref(), Some("interval out of range"));
        claimer.round_done();
        assert!(health.stalled().is_empty(), "one good round recovers it");
        health.update("promoter", long_ago);
        promoter.idle();
        assert!(health.stalled().is_empty(), "a follower's promoter is idle");
        promoter.crashed("overflow".into());
        assert_eq!(health.stalled()[0].error.as_deref(), Some("overflow"));
    }
}
