//! Liveness (SPEC §5): the replica heartbeat every replica writes, the
//! leader lease that picks one replica for the singleton loops, and the
//! sweeper the leader runs.

mod leader;
mod replica_heartbeat;
mod replica_views;
mod sweeper;

pub use self::leader::{LeaderLease, Leadership};
pub use self::replica_heartbeat::ReplicaHeartbeat;
pub use self::replica_views::replica_views;
pub use self::sweeper::{PRUNE_AFTER, Sweeper};
