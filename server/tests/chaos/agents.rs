//! Agents beside the replicas (PostgreSQL mode; docs/agents.md): two
//! `baton agent` processes, each reaching every replica through proxies
//! of its own, so a fault can cut one agent off from the replicas while
//! the replicas still see each other and the database. Their faults:
//! SIGKILL and a restart, SIGSTOP past `stale_after`, a partition from
//! every replica, and SIGTERM with a one-second grace.

use std::time::Duration;

use crate::STALE_AFTER;
use crate::common::process::{Agent, Baton};
use crate::common::proxy::{Link, Proxy};
use crate::faults::{Faults, Kill, Slot};

/// Agents run beside the three replicas.
pub const AGENTS: usize = 2;
/// Worker slots of each agent: as many as a replica's, so agents take a
/// fair share of the work (the leader's rounds claim for itself first).
const WORKERS: usize = 4;

pub const AGENT_KINDS: &[&str] = &[
    "agent SIGKILL",
    "agent SIGSTOP",
    "agent partition",
    "agent SIGTERM",
    AGENT_DRAIN,
];
/// An operator drains an agent for a while, then resumes it.
pub const AGENT_DRAIN: &str = "agent drain";

/// One agent: its process (absent while killed) and its proxies, one per
/// replica, in the replicas' order.
pub struct AgentSlot {
    pub agent: Option<Agent>,
    proxies: Vec<Proxy>,
    /// The first agent carries the label pinned tasks ask for, as replica
    /// 0 does: pins are kept (and reassigned) across agents too.
    pinned: bool,
}

impl AgentSlot {
    pub async fn start(replicas: &[Slot], pinned: bool) -> AgentSlot {
        let mut proxies = Vec::new();
        for slot in replicas {
            let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], slot.port));
            proxies.push(Proxy::start(upstream).await);
        }
        let mut slot = AgentSlot {
            agent: None,
            proxies,
            pinned,
        };
        slot.restart_if_down(replicas).await;
        slot
    }

    pub async fn restart_if_down(&mut self, replicas: &[Slot]) {
        for proxy in &self.proxies {
            proxy.heal();
        }
        if self.agent.is_some() {
            return;
        }
        let urls: Vec<String> = replicas
            .iter()
            .zip(&self.proxies)
            .map(|(slot, proxy)| proxy.route(&format!("http://127.0.0.1:{}", slot.port)))
            .collect();
        let watch: &Baton = replicas
            .iter()
            .find_map(|s| s.baton.as_ref())
            .expect("a replica is up to watch the agent start");
        let mut env = vec![("BATON_SHUTDOWN_GRACE", "1s")];
        if self.pinned {
            env.push(("BATON_LABELS", "pinned"));
        }
        self.agent = Some(Agent::start_at(&urls, watch, WORKERS, &env).await);
    }

    fn cut(&self, link: Link) {
        for proxy in &self.proxies {
            proxy.set(link);
        }
    }
}

/// Injects one agent fault (`kind`, from [`AGENT_KINDS`]) and heals it;
/// the agent it hit, for the fault's span.
pub async fn inject(
    kind: &'static str,
    rng: &mut fastrand::Rng,
    agents: &mut [AgentSlot],
    replicas: &[Slot],
    faults: &mut Faults,
) -> Option<String> {
    let slot = &mut agents[rng.usize(0..agents.len())];
    let agent = slot.agent.as_mut()?;
    let agent_id = agent.agent_id.clone();
    let outage = STALE_AFTER * 2 + Duration::from_millis(rng.u64(0..1500));
    match kind {
        "agent SIGKILL" => {
            agent.sigkill().await;
            let at = chrono::Utc::now();
            slot.agent = None;
            tokio::time::sleep(Duration::from_millis(rng.u64(0..1500))).await;
            slot.restart_if_down(replicas).await;
            faults.kills.push(Kill {
                replica: agent_id.clone(),
                at,
                replaced_at: chrono::Utc::now(),
            });
        }
        "agent SIGSTOP" => {
            agent.sigstop();
            tokio::time::sleep(outage).await;
            agent.sigcont();
        }
        "agent partition" => {
            slot.cut(Link::Blackhole);
            tokio::time::sleep(outage).await;
            slot.cut(Link::Open);
        }
        AGENT_DRAIN => {
            let api = replicas.iter().find_map(|s| s.baton.as_ref())?;
            crate::faults::drained_for(api, &agent_id, outage).await;
        }
        _ => {
            let status = agent.sigterm_and_wait(Duration::from_secs(20)).await;
            assert!(status.success(), "{agent_id} exited {status} after SIGTERM");
            slot.agent = None;
            tokio::time::sleep(Duration::from_millis(rng.u64(0..1000))).await;
            slot.restart_if_down(replicas).await;
        }
    }
    Some(agent_id)
}
