//! Liveness (docs/design.md, "Liveness"): the replica heartbeat every
//! replica writes, each executing run's own heartbeat, the leader lease
//! that picks one replica for the singleton loops, and the sweeper the
//! leader runs.

mod clock_sync;
mod leader;
mod replica_heartbeat;
mod replica_views;
mod run_heartbeat;
mod sweeper;
mod unwritable;

pub use self::clock_sync::ClockSync;
pub use self::leader::{LeaderLease, Leadership, round_interval};
pub use self::replica_heartbeat::ReplicaHeartbeat;
pub use self::replica_views::replica_views;
pub use self::run_heartbeat::{RunHandle, RunHeartbeat, RunTable};
pub use self::sweeper::{PRUNE_AFTER, Sweeper};
