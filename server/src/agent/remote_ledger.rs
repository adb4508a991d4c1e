//! An agent's [`RunLedger`]: every write is a worker-protocol call to a
//! replica (docs/agents.md). The agent knows several replicas (or one
//! load balancer); a call that cannot reach one, or that one answers with
//! a server error, goes to the next at once, so a replica dying under an
//! agent costs its runs one call's timeout, never their heartbeats.
//!
//! A refusal of the agent itself (its token unknown or revoked, its
//! labels not allowed, another protocol version) is no outage: it fires
//! [`RemoteLedger::refused`], and the agent stops everything it runs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use super::protocol::{
    AgentBeat, Bye, Finished, Finishes, HandBack, HandedBack, Hello, LogKept, LogLines, PROTOCOL,
    RunBeat, RunBeats, RunsBeaten, Take, Taken, TakenRun, Welcome, WireFinish, WireLine,
};
use crate::loops::RunLedger;
use crate::secret::Secret;
use crate::store::{
    Beaten, Claim, ClaimedRun, Finish, FinishReport, LogLine, ReplicaInfo, Result, Signals,
    StoreError,
};
use domain::time::Ts;

/// How long a take waits at a replica for a run to become AVAILABLE.
pub const TAKE_WAIT: Duration = Duration::from_secs(20);

pub struct RemoteLedger {
    http: reqwest::Client,
    /// Replicas' base URLs, `https://host:port` without a trailing slash.
    servers: Vec<String>,
    /// The one calls go to until it fails.
    current: AtomicUsize,
    token: Option<Secret>,
    /// Never raised by a replica: the claimer's wake-up after each take
    /// (the take's own wait is the long poll), and a cancel's beat comes
    /// on the run's interval.
    signals: Arc<Signals>,
    /// Set by the hello: sent back with every beat.
    started_at_micros: OnceLock<i64>,
    /// How long one call may take before the next replica is asked: a
    /// quarter of `stale_after`, so a replica that hangs costs a beat
    /// well before the agent's ownership lapses.
    call_timeout: Mutex<Duration>,
    /// Fires when a replica refuses this agent (token, labels, version).
    pub refused: CancellationToken,
    /// Why it was refused, for the agent's last words.
    refusal: Mutex<Option<String>>,
    /// Fires at shutdown: a take waiting at a replica is abandoned.
    stopping: CancellationToken,
    /// When the last take's runs were confirmed by a beat
    /// ([`RunLedger::claim_proven_from`]).
    take_proven: Mutex<Option<std::time::Instant>>,
}

impl RemoteLedger {
    pub fn new(
        servers: Vec<String>,
        token: Option<Secret>,
        extra_roots: &[reqwest::Certificate],
        stopping: CancellationToken,
    ) -> anyhow::Result<Self> {
        let http = crate::tls::trusting(reqwest::Client::builder(), extra_roots)
            .connect_timeout(Duration::from_secs(2))
            .user_agent(concat!("baton-agent/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(RemoteLedger {
            http,
            servers,
            current: AtomicUsize::new(0),
            token,
            signals: Arc::default(),
            started_at_micros: OnceLock::new(),
            call_timeout: Mutex::new(Duration::from_secs(5)),
            refused: CancellationToken::new(),
            refusal: Mutex::new(None),
            stopping,
            take_proven: Mutex::new(None),
        })
    }

    /// Why a replica refused this agent, once [`RemoteLedger::refused`]
    /// fired.
    pub fn refusal(&self) -> Option<String> {
        self.refusal.lock().expect("poisoned").clone()
    }

    /// Introduces the agent; keeps the timings the replica answers with.
    pub async fn hello(&self, hello: &Hello) -> Result<Welcome> {
        let welcome: Welcome = self.call("hello", hello, None).await?;
        let _ = self.started_at_micros.set(welcome.started_at_micros);
        *self.call_timeout.lock().expect("poisoned") =
            Duration::from_millis(welcome.stale_after_ms / 4).max(Duration::from_millis(500));
        Ok(welcome)
    }

    /// Sends `body` to `path` under `/api/v1/worker/`, trying each replica
    /// once from the current one. `timeout` overrides the call timeout (a
    /// take waits longer).
    async fn call<B: Serialize, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        timeout: Option<Duration>,
    ) -> Result<R> {
        Ok(self.call_answered(path, body, timeout).await?.0)
    }

    /// [`RemoteLedger::call`], with the answer's headers (a beat's says
    /// whether an operator drains this agent).
    async fn call_answered<B: Serialize, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        timeout: Option<Duration>,
    ) -> Result<(R, HeaderMap)> {
        let timeout = timeout.unwrap_or(*self.call_timeout.lock().expect("poisoned"));
        let first = self.current.load(Ordering::SeqCst);
        let mut failures = Vec::new();
        for step in 0..self.servers.len() {
            let i = (first + step) % self.servers.len();
            let server = &self.servers[i];
            match self.call_one(server, path, body, timeout).await {
                Ok(answer) => {
                    self.current.store(i, Ordering::SeqCst);
                    return Ok(answer);
                }
                // The database's lock, not this replica's trouble.
                Err(Failure::LockWait) => {
                    self.current.store(i, Ordering::SeqCst);
                    return Err(StoreError::LockWait);
                }
                Err(Failure::Refused(why)) => {
                    let why = format!("{server} refused this agent: {why}");
                    self.refusal
                        .lock()
                        .expect("poisoned")
                        .get_or_insert(why.clone());
                    self.refused.cancel();
                    return Err(StoreError::Remote(why));
                }
                Err(Failure::Outage(why)) => failures.push(format!("{server}: {why}")),
            }
        }
        // Start from the next one next time.
        self.current
            .store((first + 1) % self.servers.len(), Ordering::SeqCst);
        Err(StoreError::Remote(format!(
            "no replica took /api/v1/worker/{path}: {}",
            failures.join("; ")
        )))
    }

    async fn call_one<B: Serialize, R: DeserializeOwned>(
        &self,
        server: &str,
        path: &str,
        body: &B,
        timeout: Duration,
    ) -> std::result::Result<(R, HeaderMap), Failure> {
        let mut request = self
            .http
            .post(format!("{server}/api/v1/worker/{path}"))
            .header(super::protocol::PROTOCOL_HEADER, PROTOCOL.to_string())
            .timeout(timeout)
            .json(body);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token.expose());
        }
        let response = request
            .send()
            .await
            .map_err(|e| Failure::Outage(without_url(e)))?;
        let status = response.status();
        let headers = response.headers().clone();
        let text = response
            .text()
            .await
            .map_err(|e| Failure::Outage(without_url(e)))?;
        if status.is_success() {
            let text = if text.is_empty() { "null" } else { &text };
            return match serde_json::from_str(text) {
                Ok(answer) => Ok((answer, headers)),
                Err(e) => Err(Failure::Outage(format!(
                    "an answer that is not the protocol's: {e}"
                ))),
            };
        }
        if status == StatusCode::SERVICE_UNAVAILABLE
            && headers.contains_key(super::protocol::LOCK_WAIT_HEADER)
        {
            return Err(Failure::LockWait);
        }
        let message = serde_json::from_str::<domain::model::ErrorBody>(&text)
            .map(|b| b.error)
            .unwrap_or_else(|_| text.chars().take(300).collect());
        match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::CONFLICT => {
                Err(Failure::Refused(format!("{status}: {message}")))
            }
            // A replica stopping, overloaded or without its database;
            // and 4xx a proxy may answer for a replica that is gone.
            _ => Err(Failure::Outage(format!("{status}: {message}"))),
        }
    }

    /// The taken runs still this agent's after one beat, sent as they
    /// arrive. A take may wait seconds at the replica before its claim,
    /// and the claim's stamp is the replica's: what proves the agent owns
    /// them, from its own clock, is this beat ([`RunLedger::claim_proven_from`]).
    /// A beat that cannot be sent leaves the proof at the take's start:
    /// runs claimed long after it are then handed back unexecuted.
    async fn confirmed(&self, agent_id: &str, runs: Vec<TakenRun>) -> Vec<TakenRun> {
        if runs.is_empty() {
            return runs;
        }
        let beats: Vec<(i64, Duration)> = runs
            .iter()
            .map(|r| (r.id, Duration::from_millis(r.heartbeat_timeout_ms)))
            .collect();
        let sent = std::time::Instant::now();
        match self.run_heartbeat_many(agent_id, &beats, Ts::now()).await {
            Ok(beaten) => {
                *self.take_proven.lock().expect("poisoned") = Some(sent);
                // Lost already (canceled, swept): not started. One an
                // operator asked to cancel starts, and its next beat
                // stops it.
                let held: std::collections::HashSet<i64> = beaten
                    .owned
                    .iter()
                    .chain(&beaten.canceling)
                    .chain(&beaten.held)
                    .copied()
                    .collect();
                runs.into_iter().filter(|r| held.contains(&r.id)).collect()
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not confirm the runs just taken");
                runs
            }
        }
    }

    fn started_at_micros(&self) -> i64 {
        self.started_at_micros.get().copied().unwrap_or_default()
    }
}

enum Failure {
    /// The replica refused the agent itself: no other replica will differ.
    Refused(String),
    /// This replica could not answer now; another may.
    Outage(String),
    /// The write waited for a lock another client holds on the database.
    LockWait,
}

/// A request error without its URL's query (none is sent) but with its
/// cause, which reqwest's own text leaves out.
fn without_url(e: reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "cannot connect"
    } else {
        "request failed"
    };
    // The whole chain: the reason a TLS handshake failed ("invalid peer
    // certificate: UnknownIssuer") is three causes down.
    let mut text = kind.to_owned();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = c.source();
    }
    text
}

/// How long a take may take before its start no longer proves its runs:
/// an eighth of the shortest heartbeat timeout among them, well inside
/// the quarter the worker keeps spare.
fn claim_margin_ms(runs: &[TakenRun]) -> u64 {
    runs.iter()
        .map(|r| r.heartbeat_timeout_ms / 8)
        .min()
        .unwrap_or(0)
}

/// Milliseconds from `earlier` to `later`, 0 when it is not earlier.
fn ms_between(earlier: Ts, later: Ts) -> u64 {
    (later.0 - earlier.0).num_milliseconds().max(0) as u64
}

#[async_trait::async_trait]
impl RunLedger for RemoteLedger {
    fn signals(&self) -> &Arc<Signals> {
        &self.signals
    }

    async fn run_claim_many(&self, claim: &Claim<'_>, _now: Ts) -> Result<Vec<ClaimedRun>> {
        let take = Take {
            agent_id: claim.replica_id.to_owned(),
            labels: claim.labels.to_vec(),
            slots: u32::try_from(claim.limit).unwrap_or(u32::MAX),
            wait_ms: TAKE_WAIT.as_millis() as u64,
        };
        let sent = std::time::Instant::now();
        let asked = self.call::<_, Taken>("take", &take, Some(TAKE_WAIT + Duration::from_secs(10)));
        let taken = tokio::select! {
            taken = asked => taken?,
            // Abandoned: runs the replica may have claimed meanwhile are
            // the sweeper's once this agent's row is gone.
            _ = self.stopping.cancelled() => return Ok(Vec::new()),
        };
        // The take was the wait: ask again as soon as a slot is free.
        self.signals.available.notify_one();
        // Answered at once, the take's start proves the runs as a
        // replica's claim does; after a wait, a beat must.
        let waited = sent.elapsed() > Duration::from_millis(claim_margin_ms(&taken.runs));
        let runs = match waited {
            true => self.confirmed(claim.replica_id, taken.runs).await,
            false => taken.runs,
        };
        let now = Ts::now();
        Ok(runs
            .into_iter()
            .map(|run| ClaimedRun {
                id: run.id,
                task_id: run.task_id,
                plan_id: run.plan_id,
                attempt: run.attempt,
                executor: run.executor,
                started_at: now.minus(Duration::from_millis(run.started_ms_ago)),
                deadline: now.plus(Duration::from_millis(run.deadline_in_ms)),
                heartbeat_interval: run.heartbeat_interval_ms.map(Duration::from_millis),
                heartbeat_timeout: Duration::from_millis(run.heartbeat_timeout_ms),
            })
            .collect())
    }

    fn claim_proven_from(&self, sent: std::time::Instant) -> std::time::Instant {
        let confirmed = self.take_proven.lock().expect("poisoned").take();
        confirmed.map_or(sent, |at| at.max(sent))
    }

    async fn run_finish_many(
        &self,
        worker_id: &str,
        finishes: &[Finish],
        _now: Ts,
    ) -> Result<FinishReport> {
        let body = Finishes {
            agent_id: worker_id.to_owned(),
            finishes: finishes
                .iter()
                .map(|f| WireFinish {
                    run_id: f.run_id,
                    status: f.status.as_str().to_owned(),
                    result_code: f.result_code,
                    error: f.error.clone(),
                })
                .collect(),
        };
        let done: Finished = self.call("finish", &body, None).await?;
        Ok(FinishReport {
            finished: done.finished,
            fenced: done.fenced,
            succeeded_late: done.succeeded_late,
            ..FinishReport::default()
        })
    }

    async fn run_heartbeat_many(
        &self,
        worker_id: &str,
        beats: &[(i64, Duration)],
        _now: Ts,
    ) -> Result<Beaten> {
        let body = RunBeats {
            agent_id: worker_id.to_owned(),
            beats: beats
                .iter()
                .map(|&(run_id, timeout)| RunBeat {
                    run_id,
                    timeout_ms: timeout.as_millis() as u64,
                })
                .collect(),
        };
        let beaten: RunsBeaten = self.call("runs/beat", &body, None).await?;
        Ok(Beaten {
            owned: beaten.owned,
            canceling: beaten.canceling,
            held: beaten.held,
        })
    }

    async fn run_log_append(
        &self,
        worker_id: &str,
        run_id: i64,
        lines: &[LogLine],
    ) -> Result<bool> {
        let now = Ts::now();
        let body = LogLines {
            agent_id: worker_id.to_owned(),
            run_id,
            lines: lines
                .iter()
                .map(|l| WireLine {
                    at_ms_ago: ms_between(l.at, now),
                    stream: l.stream.to_owned(),
                    line: l.line.clone(),
                })
                .collect(),
        };
        let kept: LogKept = self.call("runs/log", &body, None).await?;
        Ok(kept.owned)
    }

    async fn run_hand_back_many(
        &self,
        worker_id: &str,
        run_ids: &[i64],
        detail: &str,
        _now: Ts,
    ) -> Result<Vec<i64>> {
        let body = HandBack {
            agent_id: worker_id.to_owned(),
            run_ids: run_ids.to_vec(),
            detail: detail.to_owned(),
        };
        let back: HandedBack = self.call("hand-back", &body, None).await?;
        Ok(back.run_ids)
    }

    async fn replica_upsert(&self, info: &ReplicaInfo, _now: Ts) -> Result<bool> {
        let body = AgentBeat {
            agent_id: info.replica_id.clone(),
            hostname: info.hostname.clone(),
            labels: info.labels.clone(),
            version: info.version.clone(),
            started_at_micros: self.started_at_micros(),
        };
        let ((), headers) = self.call_answered("beat", &body, None).await?;
        Ok(headers.contains_key(super::protocol::DRAINING_HEADER))
    }

    async fn replica_delete(&self, worker_id: &str) -> Result<()> {
        let body = Bye {
            agent_id: worker_id.to_owned(),
        };
        self.call::<_, ()>("bye", &body, None).await
    }
}
