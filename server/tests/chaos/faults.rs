//! The faults a chaos schedule injects, one at a time and healed before
//! the next, so that the other replicas keep the work moving: a replica
//! killed (SIGKILL) and restarted, frozen (SIGSTOP) past `stale_after`,
//! cut off from PostgreSQL by its proxy in one of the ways a network
//! fails, restarted on a host whose wall clock is seconds or hours off
//! (libfaketime; docs/design.md, "One clock"), or the whole PostgreSQL
//! cluster restarted under everyone.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::common::process::{Baton, Options};
use crate::common::proxy::{Link, Proxy};
use crate::{Mode, STALE_AFTER};

/// One replica: its process (absent while killed), behind its own proxy
/// on PostgreSQL.
pub struct Slot {
    pub baton: Option<Baton>,
    pub proxy: Option<Proxy>,
    /// The database URL this replica is started with.
    pub url: String,
    pub index: usize,
}

impl Slot {
    pub async fn restart_if_down(&mut self) {
        if let Some(proxy) = &self.proxy {
            proxy.heal();
        }
        if self.baton.is_none() {
            self.baton = Some(Baton::start(&self.url, &options(self.index)).await);
        }
    }

    /// Kills the replica and starts it again with its wall clock `offset`
    /// off (libfaketime's syntax): a killed replica for invariant 6.
    async fn restart_with_clock(&mut self, offset: Option<&str>, faults: &mut Faults) {
        if let Some(mut baton) = self.baton.take() {
            baton.sigkill().await;
            let (replica, at) = (baton.replica_id.clone(), chrono::Utc::now());
            let options = match offset {
                Some(offset) => options(self.index).wall_clock_off_by(offset),
                None => options(self.index),
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
    let options = Options::fast_liveness();
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
];
const SQLITE_KINDS: &[&str] = &["SIGKILL", "SIGSTOP"];

/// Injects one fault and heals it before returning.
pub async fn inject(
    mode: Mode,
    rng: &mut fastrand::Rng,
    slots: &mut [Slot],
    cluster: Option<&Cluster>,
    faults: &mut Faults,
    started: Instant,
) {
    let kinds = match mode {
        Mode::Postgres => POSTGRES_KINDS,
        Mode::Sqlite => SQLITE_KINDS,
    };
    let kind = kinds[rng.usize(0..kinds.len())];
    let index = rng.usize(0..slots.len());
    let slot = &mut slots[index];
    let Some(baton) = slot.baton.as_mut() else {
        return;
    };
    // Longer than stale_after, so other replicas may sweep and retry.
    let outage = STALE_AFTER * 2 + Duration::from_millis(rng.u64(0..1500));
    let wall = chrono::Utc::now().format("%H:%M:%S%.3f");
    let began = Instant::now();
    faults.log.push(format!(
        "{wall} (+{:.1}s) {kind} {}",
        started.elapsed().as_secs_f64(),
        if kind == "PostgreSQL restart" {
            "of every replica's database"
        } else {
            &baton.replica_id
        }
    ));
    *faults.by_kind.entry(kind).or_default() += 1;
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
        "clock skew" => {
            let offset = CLOCK_OFFSETS[rng.usize(0..CLOCK_OFFSETS.len())];
            if let Some(entry) = faults.log.last_mut() {
                entry.push_str(&format!(" ({offset})"));
            }
            slot.restart_with_clock(Some(offset), faults).await;
            tokio::time::sleep(outage).await;
            slot.restart_with_clock(None, faults).await;
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
    if let Some(entry) = faults.log.last_mut() {
        entry.push_str(&format!(", healed after {:.1?}", began.elapsed()));
    }
}
