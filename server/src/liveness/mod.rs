//! Liveness (docs/design.md, "Liveness"): the replica heartbeat every
//! replica writes, each executing run's own heartbeat, the leader lease
//! that picks one replica for the singleton loops, and the sweeper the
//! leader runs.

mod clock_sync;
mod last_words;
mod leader;
mod replica_heartbeat;
mod replica_views;
mod run_heartbeat;
mod sweeper;
mod unwritable;

/// At shutdown, how long a last write (finishes, the hand-back, the
/// lease's release, the heartbeat row's removal) may take: a database that
/// is gone must not keep the process from exiting. What could not be
/// written resolves itself: the lease expires, the row goes stale, the
/// sweeper fails or retries the runs.
pub const LAST_WRITE: std::time::Duration = std::time::Duration::from_secs(2);

pub use self::clock_sync::ClockSync;
pub use self::last_words::LastWords;
pub use self::leader::{LeaderLease, Leadership, round_interval};
pub use self::replica_heartbeat::ReplicaHeartbeat;
pub use self::replica_views::replica_views;
pub use self::run_heartbeat::{RunHandle, RunHeartbeat, RunTable};
pub use self::sweeper::{PRUNE_AFTER, Sweeper};
