//! `GET /metrics`: Prometheus text exposition (format 0.0.4).
//!
//! Two kinds of figures. Cluster-wide gauges come from the database, so
//! every replica answers the same and one scrape target is enough for them:
//! runs in each live status, runs finished in the last hour, replicas by
//! liveness. Per-replica counters come from this process (runs claimed and
//! finished since it started), for rates and for seeing which replica does
//! the work. If the database does not answer, the process figures are still
//! served and `baton_database_up` is 0, so an alert can tell "Baton is down"
//! from "its database is".
//!
//! Written by hand: the format is a few lines of text, and a metrics crate
//! would add a registry and dependencies for nothing the scrape needs.

use std::fmt::Write;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use domain::model::{PlanStatus, RunStatus};

use super::ApiState;
use super::health::PROBE_WAIT;
use crate::loops::RunCounts;
use crate::replica_views::replica_views;
use domain::time::Ts;

const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub async fn metrics(State(state): State<ApiState>) -> impl IntoResponse {
    let now = Ts::now();
    let mut out = Exposition::default();
    let me = &state.replica.replica_id;
    out.family(
        "baton_info",
        "gauge",
        "This replica: always 1, labelled with its id and version.",
    );
    out.sample(
        "baton_info",
        &[("replica_id", me), ("version", &state.replica.version)],
        1,
    );

    process_counters(&mut out, state.counters.snapshot());

    let live = state.live.stats();
    out.family(
        "baton_live_views",
        "gauge",
        "Dashboard views this replica's live feed follows now (one refresher each).",
    );
    out.sample("baton_live_views", &[], live.views);
    out.family(
        "baton_live_subscribers",
        "gauge",
        "Open live feed connections (dashboard tabs) on this replica.",
    );
    out.sample("baton_live_subscribers", &[], live.subscribers);
    out.family(
        "baton_live_reads_total",
        "counter",
        "Views the live feed read from the database since this replica started.",
    );
    out.sample("baton_live_reads_total", &[], live.reads);

    let requests = state.requests.stats();
    out.family(
        "baton_request_slots_held",
        "gauge",
        "Requests this replica is working on now (BATON_REQUEST_SLOTS bounds them).",
    );
    out.sample("baton_request_slots_held", &[], requests.held);
    out.family(
        "baton_requests_waiting",
        "gauge",
        "Requests waiting for a slot on this replica now.",
    );
    out.sample("baton_requests_waiting", &[], requests.waiting);
    out.family(
        "baton_requests_refused_total",
        "counter",
        "Requests answered 429 since this replica started: their user had \
         BATON_REQUESTS_PER_USER in flight.",
    );
    out.sample("baton_requests_refused_total", &[], requests.refused);

    // Both reads at once, each bounded: with the database down they took
    // the pool's 10 s each, one after the other.
    let (stats, replicas, halted) = tokio::join!(
        tokio::time::timeout(PROBE_WAIT, state.store.overview_stats(now)),
        tokio::time::timeout(
            PROBE_WAIT,
            replica_views(state.store.as_ref(), state.stale_after, now)
        ),
        tokio::time::timeout(
            PROBE_WAIT,
            state.store.plan_list(Some(PlanStatus::Halted), None, 0, 0)
        ),
    );
    let stats = stats.map_err(|_| ()).and_then(|r| r.map_err(|_| ()));
    let replicas = replicas.map_err(|_| ()).and_then(|r| r.map_err(|_| ()));
    out.family(
        "baton_database_up",
        "gauge",
        "1 when the database answered this scrape's queries.",
    );
    out.sample(
        "baton_database_up",
        &[],
        u64::from(stats.is_ok() && replicas.is_ok()),
    );
    if let Ok(stats) = stats {
        out.family(
            "baton_runs",
            "gauge",
            "Runs in each live status now, across every replica.",
        );
        for status in [RunStatus::Pending, RunStatus::Available, RunStatus::Running] {
            let n = stats.live.get(&status).copied().unwrap_or(0);
            out.sample("baton_runs", &[("status", status.as_str())], n);
        }
        out.family(
            "baton_runs_finished_last_hour",
            "gauge",
            "Runs that ended in the last hour (whole minutes), across every replica, by final status.",
        );
        for (status, n) in &stats.last_hour {
            out.sample(
                "baton_runs_finished_last_hour",
                &[("status", status.as_str())],
                *n,
            );
        }
    }
    if let Ok(Ok(halted)) = halted {
        out.family(
            "baton_plans_halted",
            "gauge",
            "Plans that cannot move until an operator retries or skips a task (HALTED).",
        );
        out.sample("baton_plans_halted", &[], halted.total);
    }
    if let Ok(workers) = replicas {
        out.family(
            "baton_workers_draining",
            "gauge",
            "Replicas and agents an operator drains (they take no new run), by kind.",
        );
        for kind in [
            domain::model::WorkerKind::Replica,
            domain::model::WorkerKind::Agent,
        ] {
            let draining = workers
                .iter()
                .filter(|w| w.kind == kind && w.draining_since.is_some())
                .count();
            out.sample(
                "baton_workers_draining",
                &[("kind", kind.as_str())],
                draining,
            );
        }
        let (agents, replicas): (Vec<_>, Vec<_>) = workers
            .into_iter()
            .partition(|r| r.kind == domain::model::WorkerKind::Agent);
        agent_gauges(&mut out, &agents, now);
        let alive = replicas.iter().filter(|r| r.alive).count();
        out.family(
            "baton_replicas",
            "gauge",
            "Replicas with a heartbeat row, by whether their heartbeat is fresh.",
        );
        out.sample("baton_replicas", &[("alive", "true")], alive);
        out.sample(
            "baton_replicas",
            &[("alive", "false")],
            replicas.len() - alive,
        );
        let mine = replicas.iter().find(|r| &r.replica_id == me);
        out.family(
            "baton_replica_leader",
            "gauge",
            "1 when this replica holds the leader lease (promoter, sweeper).",
        );
        out.sample(
            "baton_replica_leader",
            &[],
            u64::from(mine.is_some_and(|r| r.leader)),
        );
        out.family(
            "baton_replica_runs_running",
            "gauge",
            "Runs RUNNING on this replica now, as the database records them.",
        );
        out.sample(
            "baton_replica_runs_running",
            &[],
            mine.map_or(0, |r| r.running),
        );
    }
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], out.text)
}

/// Every agent's liveness and runs, from its row (any replica answers the
/// same): agents have no `/metrics` of their own.
fn agent_gauges(out: &mut Exposition, agents: &[domain::model::ReplicaView], now: Ts) {
    let alive = agents.iter().filter(|a| a.alive).count();
    out.family(
        "baton_agents",
        "gauge",
        "Agents (baton agent) with a heartbeat row, by whether their heartbeat is fresh.",
    );
    out.sample("baton_agents", &[("alive", "true")], alive);
    out.sample("baton_agents", &[("alive", "false")], agents.len() - alive);
    out.family(
        "baton_agent_runs_running",
        "gauge",
        "Runs RUNNING on each agent now, as the database records them.",
    );
    for agent in agents {
        out.sample(
            "baton_agent_runs_running",
            &[
                ("agent_id", &agent.replica_id),
                ("hostname", &agent.hostname),
            ],
            agent.running,
        );
    }
    out.family(
        "baton_agent_heartbeat_age_seconds",
        "gauge",
        "Seconds since each agent's last heartbeat was recorded.",
    );
    for agent in agents {
        let age = (now.0 - agent.last_heartbeat).num_milliseconds().max(0) as f64 / 1000.0;
        out.sample(
            "baton_agent_heartbeat_age_seconds",
            &[
                ("agent_id", &agent.replica_id),
                ("hostname", &agent.hostname),
            ],
            age,
        );
    }
}

/// This process's counters since it started ([`RunCounts`]).
fn process_counters(out: &mut Exposition, counts: RunCounts) {
    out.family(
        "baton_replica_runs_claimed_total",
        "counter",
        "Runs this replica claimed since it started.",
    );
    out.sample("baton_replica_runs_claimed_total", &[], counts.claimed);
    out.family(
        "baton_replica_runs_claimed_in_round_total",
        "counter",
        "Of the runs this replica claimed, those its own promotion round claimed as it promoted them (on the leader, while it had free worker slots).",
    );
    out.sample(
        "baton_replica_runs_claimed_in_round_total",
        &[],
        counts.claimed_in_round,
    );
    out.family(
        "baton_replica_runs_finished_total",
        "counter",
        "Runs this replica finished since it started, by final status.",
    );
    for (status, n) in [
        (RunStatus::Done, counts.done),
        (RunStatus::Failed, counts.failed),
        (RunStatus::Canceled, counts.canceled),
    ] {
        out.sample(
            "baton_replica_runs_finished_total",
            &[("status", status.as_str())],
            n,
        );
    }
    out.family(
        "baton_replica_finishes_fenced_total",
        "counter",
        "Finishes this replica did not record because the run was no longer its own (canceled or swept meanwhile).",
    );
    out.sample("baton_replica_finishes_fenced_total", &[], counts.fenced);
}

/// The exposition text, one metric family after another.
#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.text.push_str(name);
        if !labels.is_empty() {
            let pairs: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let _ = write!(self.text, "{{{}}}", pairs.join(","));
        }
        let _ = writeln!(self.text, " {value}");
    }
}

/// Label values escape backslash, double quote and newline.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_follow_the_text_format() {
        let mut out = Exposition::default();
        out.family("baton_runs", "gauge", "Runs.");
        out.sample("baton_runs", &[("status", "PENDING")], 3);
        out.sample("baton_x", &[("a", "q\"b\\c\nd"), ("z", "1")], 0);
        out.sample("baton_y", &[], 7);
        assert_eq!(
            out.text,
            "# HELP baton_runs Runs.\n# TYPE baton_runs gauge\n\
             baton_runs{status=\"PENDING\"} 3\n\
             baton_x{a=\"q\\\"b\\\\c\\nd\",z=\"1\"} 0\n\
             baton_y 7\n"
        );
    }

    /// Each counter is exposed under its own name: a test against a
    /// running server cannot tell them apart (who claims a run there
    /// depends on timing), so this one gives each a different value.
    #[test]
    fn process_counters_expose_each_count_under_its_name() {
        let mut out = Exposition::default();
        process_counters(
            &mut out,
            RunCounts {
                claimed: 7,
                claimed_in_round: 5,
                done: 4,
                failed: 2,
                canceled: 1,
                fenced: 3,
            },
        );
        let samples: Vec<&str> = out.text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "baton_replica_runs_claimed_total 7",
                "baton_replica_runs_claimed_in_round_total 5",
                "baton_replica_runs_finished_total{status=\"DONE\"} 4",
                "baton_replica_runs_finished_total{status=\"FAILED\"} 2",
                "baton_replica_runs_finished_total{status=\"CANCELED\"} 1",
                "baton_replica_finishes_fenced_total 3",
            ]
        );
    }
}
