//! The default timings of liveness (docs/design.md, "Liveness"): how
//! often replicas and runs heartbeat, when silence makes them stale, how
//! often the leader sweeps and how long its lease lasts. Every replica of
//! a cluster should run with the same; the defaults resolve a killed
//! replica's runs within `STALE_AFTER + SWEEP_INTERVAL` (11 s).

use std::time::Duration;

pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(2);
/// A replica (or a run) with no heartbeat for this long is stale.
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(10);
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(1);
pub const DEFAULT_LEADER_LEASE: Duration = Duration::from_secs(6);
