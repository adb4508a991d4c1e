//! The worker protocol's messages (docs/agents.md): what `baton agent`
//! sends a replica under `/api/v1/worker/` and what it answers. Times an
//! agent's clock could get wrong travel as ages and durations, never as
//! instants: the replica stamps every write with the database's clock.

use serde::{Deserialize, Serialize};

/// The protocol's version. A replica refuses an agent of another one with
/// a message naming both; bump it whenever a message changes shape.
pub const PROTOCOL: u32 = 1;

/// The header every call carries its protocol version in: a replica of
/// another version refuses before reading the body.
pub const PROTOCOL_HEADER: &str = "baton-worker-protocol";

/// Present on a beat's answer while an operator drains the agent: it
/// takes no new run until a beat comes back without it. A header, not a
/// field, so an agent that does not know it still reads the answer (the
/// replica refuses its takes all the same).
pub const DRAINING_HEADER: &str = "baton-worker-draining";

/// Present on a 503 whose write waited its bound for a lock another
/// client holds on the database. A heartbeat so answered counts as
/// proof, as a replica's own does (docs/design.md, "Liveness"), and is
/// sent again at once to the same replica: any other waits for the same
/// lock.
pub const LOCK_WAIT_HEADER: &str = "baton-lock-wait";

/// Ids of agents start with this, then the name their token was given
/// (the token's side of it is `auth::agent_tokens`).
pub use crate::auth::AGENT_ID_PREFIX;

/// The longest a take may wait for a run, in milliseconds.
pub const MAX_TAKE_WAIT_MS: u64 = 30_000;

/// An agent introducing itself: the replica checks the protocol and the
/// labels against its token, and names the agent.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    pub protocol: u32,
    pub hostname: String,
    pub labels: Vec<String>,
    pub version: String,
    pub workers: u32,
}

/// The replica's answer to [`Hello`]: the agent's id and the liveness
/// timings it must keep, which are the replicas' own (the sweeper judges
/// an agent by them).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Welcome {
    pub agent_id: String,
    pub protocol: u32,
    pub heartbeat_interval_ms: u64,
    pub stale_after_ms: u64,
    pub run_heartbeat_timeout_ms: u64,
    pub max_log_bytes: u64,
    /// When the agent's row says it started (the database's clock), to
    /// send back with every beat.
    pub started_at_micros: i64,
}

/// Who an agent is, sent with every beat: a replica that never saw the
/// agent's hello (behind a load balancer) writes the same row.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentBeat {
    pub agent_id: String,
    pub hostname: String,
    pub labels: Vec<String>,
    pub version: String,
    pub started_at_micros: i64,
}

/// Asks for up to `slots` runs the labels allow, waiting up to `wait_ms`
/// for one to become AVAILABLE.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Take {
    pub agent_id: String,
    pub labels: Vec<String>,
    pub slots: u32,
    pub wait_ms: u64,
}

/// A run taken: RUNNING under the agent from the moment the replica
/// answered.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TakenRun {
    pub id: i64,
    pub task_id: i64,
    pub plan_id: i64,
    pub attempt: i64,
    pub executor: serde_json::Value,
    /// How long ago the run started, as the replica answered.
    pub started_ms_ago: u64,
    /// How long it may still run before it is timed out.
    pub deadline_in_ms: u64,
    pub heartbeat_interval_ms: Option<u64>,
    pub heartbeat_timeout_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Taken {
    pub runs: Vec<TakenRun>,
}

/// Pushes the heartbeat deadlines of the agent's runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunBeats {
    pub agent_id: String,
    pub beats: Vec<RunBeat>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunBeat {
    pub run_id: i64,
    pub timeout_ms: u64,
}

/// Which runs are still the agent's; a run in none of the lists is lost
/// and its execution must stop.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunsBeaten {
    pub owned: Vec<i64>,
    pub canceling: Vec<i64>,
    pub held: Vec<i64>,
}

/// Lines of one run's output. `at_ms_ago` counts back from `sent`, so a
/// wrong clock on the agent moves no line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogLines {
    pub agent_id: String,
    pub run_id: i64,
    pub lines: Vec<WireLine>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireLine {
    pub at_ms_ago: u64,
    pub stream: String,
    pub line: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogKept {
    /// False: the run is no longer the agent's, and nothing was kept.
    pub owned: bool,
}

/// How executions ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Finishes {
    pub agent_id: String,
    pub finishes: Vec<WireFinish>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireFinish {
    pub run_id: i64,
    /// `DONE`, `FAILED`, or `CANCELED` (a kill an operator asked for).
    pub status: String,
    pub result_code: Option<i64>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Finished {
    pub finished: Vec<i64>,
    /// Runs no longer the agent's: nothing recorded.
    pub fenced: Vec<i64>,
    pub succeeded_late: Vec<i64>,
}

/// Returns runs the agent will not run (shutdown, or a take answered too
/// late) to AVAILABLE, same attempt.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandBack {
    pub agent_id: String,
    pub run_ids: Vec<i64>,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandedBack {
    pub run_ids: Vec<i64>,
}

/// The agent is leaving: its row goes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bye {
    pub agent_id: String,
}
