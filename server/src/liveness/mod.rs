//! Liveness (SPEC §5): the replica heartbeat. The sweeper, leader lease and
//! graceful hand-back come with the liveness issue.

mod replica_heartbeat;

pub use self::replica_heartbeat::ReplicaHeartbeat;
