//! The faults a chaos schedule injects, one at a time and healed before
//! the next, so that the other replicas keep the work moving: a replica
//! killed (SIGKILL) and restarted, stopped (SIGTERM, a one-second grace)
//! and restarted, frozen (SIGSTOP) past `stale_after`, cut off from
//! PostgreSQL by its proxy in one of the ways a network fails, restarted on
//! a host whose wall clock is seconds or hours off (libfaketime;
//! docs/design.md, "One clock"), frozen while an operator cancels its
//! running tasks (`operator.rs`), held up by an outside client's locks
//! (`LOCK TABLE`, a row `FOR UPDATE`), its connections killed
//! (`pg_terminate_backend`) again and again, or the whole PostgreSQL
//! cluster restarted under everyone.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::agents::{AGENT_KINDS, AgentSlot};
use crate::common::cluster::Cluster;
use crate::common::process::{Baton, Options};
use crate::common::proxy::{Link, Proxy};
use crate::operator::{self, Operator};
use crate::outside;
use crate::{Mode, STALE_AFTER};

/// One replica: its process (absent while killed), behind its own proxy
/// on PostgreSQL.
pub struct Slot {
    pub baton: Option<Baton>,
    pub proxy: Option<Proxy>,
    /// The database URL this replica is started with.
    pub url: String,
    pub index: usize,
    /// Its listen port, the same across restarts: agents keep reaching it.
    pub port: u16,
}

impl Slot {
    pub async fn restart_if_down(&mut self) {
        if let Some(proxy) = &self.proxy {
            proxy.heal();
        }
        if self.baton.is_none() {
            self.baton = Some(Baton::start(&self.url, &self.options()).await);
        }
    }

    pub fn options(&self) -> Options {
        options(self.index).port(self.port)
    }

    /// Kills the replica and starts it again with its wall clock `offset`
    /// off (libfaketime's syntax): a killed replica for invariant 6.
    async fn restart_with_clock(&mut self, offset: Option<&str>, faults: &mut Faults) {
        if let Some(mut baton) = self.baton.take() {
            baton.sigkill().await;
            let (replica, at) = (baton.replica_id.clone(), chrono::Utc::now());
            let options = match offset {
                Some(offset) => self.options().wall_clock_off_by(offset),
                None => self.options(),
            };
            self.baton = Some(Baton::start(&self.url, &options).await);
            faults.kills.push(Kill {
                replica,
                at,
                replaced_at: chrono::Utc::now(),
            });
        }
    }
}

/// The wall-clock offsets a "clock skew" fault gives a replica: a few
/// seconds either way (more than the lease and `stale_after`), and hours.
const CLOCK_OFFSETS: [&str; 4] = ["+4", "-4", "+2h", "-2h"];

/// Replica 0 carries the label pinned tasks ask for; the others take
/// pinned work once it has waited `reassign_after` for replica 0.
pub fn options(slot: usize) -> Options {
    // A short grace, so a rolling SIGTERM hands work back under load.
    let options = Options::fast_liveness().env("BATON_SHUTDOWN_GRACE", "1s");
    if slot == 0 {
        options.label("pinned")
    } else {
        options
    }
}

/// What was injected: counts by kind, and each fault with its time for
/// the report of a violation.
#[derive(Default)]
pub struct Faults {
    pub by_kind: BTreeMap<&'static str, usize>,
    pub log: Vec<String>,
    /// Each SIGKILL, for invariant 6: the replica, when it was dead and
    /// when its replacement answered.
    pub kills: Vec<Kill>,
    /// What the operator did during "cancel while frozen" faults.
    pub operator: Operator,
    pub spans: Vec<Span>,
}

impl Faults {
    pub fn total(&self) -> usize {
        self.by_kind.values().sum()
    }
}

impl std::fmt::Display for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds: Vec<String> = self
            .by_kind
            .iter()
            .map(|(kind, n)| format!("{n} {kind}"))
            .collect();
        write!(f, "{} faults ({})", self.total(), kinds.join(", "))
    }
}

/// One fault as it hit: what, which replica (`None`: every one), and
/// when, for the check that no success ran twice.
pub struct Span {
    pub kind: &'static str,
    pub replica: Option<String>,
    pub from: chrono::DateTime<chrono::Utc>,
    pub to: chrono::DateTime<chrono::Utc>,
}

impl Faults {
    /// Whether a fault that may legitimately run a finished command again
    /// hit `replica` around `at`: one that kills or freezes the replica, or
    /// cuts it off, between its command's exit and the finish it could
    /// not record (docs/operations.md). An outside lock, killed
    /// connections and a SIGTERM are not among them: a replica that lives
    /// records what its command did.
    pub fn excuse(&self, replica: &str, at: chrono::DateTime<chrono::Utc>) -> Option<&'static str> {
        let slack = chrono::TimeDelta::seconds(2);
        let settle = chrono::TimeDelta::from_std(STALE_AFTER * 3).unwrap();
        let near = |from, to| from - slack <= at && at <= to + settle;
        // Every SIGKILL, those a clock-skew fault gives the replicas it
        // starts (under ids of their own) included.
        if self
            .kills
            .iter()
            .any(|k| k.replica == replica && near(k.at, k.at))
        {
            return Some("SIGKILL");
        }
        self.spans
            .iter()
            .find(|s| {
                !KEEPS_FINISHES.contains(&s.kind)
                    && s.replica.as_deref().is_none_or(|r| r == replica)
                    && near(s.from, s.to)
            })
            .map(|s| s.kind)
    }
}

/// Faults under which a replica keeps and records every execution.
const KEEPS_FINISHES: [&str; 6] = [
    ROLLING_SIGTERM,
    AGENT_SIGTERM,
    OUTSIDE_LOCK,
    CONNECTION_KILLS,
    DRAIN,
    crate::agents::AGENT_DRAIN,
];
const ROLLING_SIGTERM: &str = "rolling SIGTERM";
/// An agent's SIGTERM: like a replica's, it records what its commands did.
const AGENT_SIGTERM: &str = "agent SIGTERM";
const OUTSIDE_LOCK: &str = "outside lock";
const CONNECTION_KILLS: &str = "connection kills";
/// An operator drains a replica for a while, then resumes it.
const DRAIN: &str = "drain";

pub struct Kill {
    pub replica: String,
    pub at: chrono::DateTime<chrono::Utc>,
    pub replaced_at: chrono::DateTime<chrono::Utc>,
}

const POSTGRES_KINDS: &[&str] = &[
    "SIGKILL",
    "SIGSTOP",
    "partition",
    "answers lost",
    "requests lost",
    "delay",
    "reset",
    "PostgreSQL restart",
    "clock skew",
    CANCEL_WHILE_FROZEN,
    ROLLING_SIGTERM,
    OUTSIDE_LOCK,
    CONNECTION_KILLS,
    DRAIN,
];
/// SQLite has one replica: frozen, nobody is left to take the cancel.
const CANCEL_WHILE_FROZEN: &str = "cancel while frozen";
const SQLITE_KINDS: &[&str] = &["SIGKILL", "SIGSTOP"];

/// Injects one fault and heals it before returning.
pub async fn inject(
    mode: Mode,
    rng: &mut fastrand::Rng,
    slots: &mut [Slot],
    agents: &mut [AgentSlot],
    cluster: Option<&Cluster>,
    faults: &mut Faults,
    started: Instant,
) {
    let kinds: Vec<&'static str> = match mode {
        Mode::Postgres => POSTGRES_KINDS.iter().chain(AGENT_KINDS).copied().collect(),
        Mode::Sqlite => SQLITE_KINDS.to_vec(),
    };
    let kind = kinds[rng.usize(0..kinds.len())];
    if kind.starts_with("agent ") {
        let from = chrono::Utc::now();
        let began = Instant::now();
        let hit = crate::agents::inject(kind, rng, agents, slots, faults).await;
        let Some(agent_id) = hit else {
            return;
        };
        faults.log.push(format!(
            "{} (+{:.1}s) {kind} {agent_id}",
            from.format("%H:%M:%S%.3f"),
            started.elapsed().as_secs_f64() - began.elapsed().as_secs_f64(),
        ));
        *faults.by_kind.entry(kind).or_default() += 1;
        healed(faults, kind, Some(agent_id), from, began);
        return;
    }
    let index = rng.usize(0..slots.len());
    let Some(replica_id) = slots[index].baton.as_ref().map(|b| b.replica_id.clone()) else {
        return;
    };
    // Longer than stale_after, so other replicas may sweep and retry.
    let outage = STALE_AFTER * 2 + Duration::from_millis(rng.u64(0..1500));
    let from = chrono::Utc::now();
    let wall = from.format("%H:%M:%S%.3f");
    let began = Instant::now();
    let hit = (kind != "PostgreSQL restart").then(|| replica_id.clone());
    faults.log.push(format!(
        "{wall} (+{:.1}s) {kind} {}",
        started.elapsed().as_secs_f64(),
        if kind == "PostgreSQL restart" {
            "of every replica's database"
        } else {
            &replica_id
        }
    ));
    *faults.by_kind.entry(kind).or_default() += 1;
    if kind == CANCEL_WHILE_FROZEN {
        let frozen = slots[index].baton.as_ref().expect("checked above");
        let other = slots
            .iter()
            .filter(|s| s.index != index)
            .find_map(|s| s.baton.as_ref());
        if let Some(other) = other {
            operator::cancel_while_frozen(rng, frozen, other, outage, &mut faults.operator).await;
        }
        healed(faults, kind, hit, from, began);
        return;
    }
    let slot = &mut slots[index];
    let baton = slot.baton.as_mut().expect("checked above");
    let link = |link: Link| slot.proxy.as_ref().expect("a proxy").set(link);
    match kind {
        "SIGKILL" => {
            baton.sigkill().await;
            let (replica, at) = (baton.replica_id.clone(), chrono::Utc::now());
            slot.baton = None;
            tokio::time::sleep(Duration::from_millis(rng.u64(0..1500))).await;
            slot.restart_if_down().await;
            let replaced_at = chrono::Utc::now();
            faults.kills.push(Kill {
                replica,
                at,
                replaced_at,
            });
        }
        "SIGSTOP" => {
            baton.sigstop();
            tokio::time::sleep(outage).await;
            baton.sigcont();
        }
        DRAIN => drained_for(baton, &replica_id, outage).await,
        "clock skew" => {
            let offset = CLOCK_OFFSETS[rng.usize(0..CLOCK_OFFSETS.len())];
            if let Some(entry) = faults.log.last_mut() {
                entry.push_str(&format!(" ({offset})"));
            }
            slot.restart_with_clock(Some(offset), faults).await;
            tokio::time::sleep(outage).await;
            slot.restart_with_clock(None, faults).await;
        }
        ROLLING_SIGTERM => {
            let status = baton.sigterm_and_wait(Duration::from_secs(20)).await;
            assert!(
                status.success(),
                "{replica_id} exited {status} after SIGTERM"
            );
            slot.baton = None;
            tokio::time::sleep(Duration::from_millis(rng.u64(0..1000))).await;
            slot.restart_if_down().await;
        }
        OUTSIDE_LOCK => {
            let url = cluster.expect("PostgreSQL mode").url();
            let lock = match rng.u8(0..4) {
                0 => "LOCK TABLE task_run IN ACCESS EXCLUSIVE MODE".to_owned(),
                1 => "LOCK TABLE replica IN ACCESS EXCLUSIVE MODE".to_owned(),
                2 => format!("SELECT FROM replica WHERE replica_id = '{replica_id}' FOR UPDATE"),
                _ => format!(
                    "SELECT FROM task_run WHERE status = 'RUNNING' AND replica_id = '{replica_id}' \
                     ORDER BY id LIMIT 1 FOR UPDATE"
                ),
            };
            if let Some(entry) = faults.log.last_mut() {
                entry.push_str(&format!(" ({lock})"));
            }
            outside::hold(&url, &lock, outage).await;
        }
        CONNECTION_KILLS => {
            let url = cluster.expect("PostgreSQL mode").url();
            outside::kill_connections(&url, outage).await;
        }
        "PostgreSQL restart" => {
            let cluster = cluster.expect("PostgreSQL mode runs its own cluster");
            // pg_ctl blocks; the proxies and replicas' clients live on
            // other worker threads meanwhile.
            tokio::task::block_in_place(|| cluster.pg_ctl_stop("fast"));
            tokio::time::sleep(Duration::from_millis(rng.u64(0..2000))).await;
            tokio::task::block_in_place(|| cluster.pg_ctl_start());
        }
        cut => {
            link(match cut {
                "partition" => Link::Blackhole,
                "answers lost" => Link::AnswersLost,
                "requests lost" => Link::RequestsLost,
                "delay" => Link::Delay(Duration::from_millis(rng.u64(50..400))),
                _ => Link::Reset,
            });
            tokio::time::sleep(outage).await;
            link(Link::Open);
        }
    }
    healed(faults, kind, hit, from, began);
}

fn healed(
    faults: &mut Faults,
    kind: &'static str,
    replica: Option<String>,
    from: chrono::DateTime<chrono::Utc>,
    began: Instant,
) {
    if let Some(entry) = faults.log.last_mut() {
        entry.push_str(&format!(", healed after {:.1?}", began.elapsed()));
    }
    faults.spans.push(Span {
        kind,
        replica,
        from,
        to: chrono::Utc::now(),
    });
}

/// An operator's drain of `worker_id` through `api`, lifted after
/// `outage`: what it runs must end as usual, and nothing be lost.
pub async fn drained_for(api: &Baton, worker_id: &str, outage: Duration) {
    for verb in ["drain", "resume"] {
        let path = format!("/api/v1/replicas/{worker_id}/{verb}");
        let (status, body) = api.post_json(&path, None).await;
        assert_eq!(status, 200, "{verb} {worker_id}: {body}");
        if verb == "drain" {
            tokio::time::sleep(outage).await;
        }
    }
}
