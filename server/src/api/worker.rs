//! The worker protocol under `/api/v1/worker/` (docs/agents.md): how a
//! `baton agent` takes runs, beats, logs and finishes them through any
//! replica, without database credentials. Each call is one fenced store
//! write under the agent's id, exactly the write a replica's own worker
//! makes, so the sweeper, the gates and the fences judge an agent as they
//! judge a replica. The guard lets only agent tokens in; each handler
//! checks that the agent id is the token's and the labels are allowed.

use std::time::Duration;

use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::{Json, http};
use domain::model::RunStatus;
use domain::time::Ts;

use super::json_body::JsonBody;
use super::{ApiError, ApiResult, ApiState};
use crate::agent::protocol::{
    AGENT_ID_PREFIX, AgentBeat, Bye, DRAINING_HEADER, Finished, Finishes, HandBack, HandedBack,
    Hello, LogKept, LogLines, MAX_TAKE_WAIT_MS, PROTOCOL, PROTOCOL_HEADER, RunBeats, RunsBeaten,
    Take, Taken, TakenRun, Welcome,
};
use crate::auth::AgentGrant;
use crate::executor::output::clean_line;
use crate::loops::MAX_WORKERS;
use crate::store::{Claim, ClaimedRun, Finish, LogLine, ReplicaInfo};

/// The most log lines one call may carry (the agent sends 512 at most).
const MAX_LINES: usize = 4096;
/// The longest a hostname, version or hand-back detail may be.
const MAX_TEXT_CHARS: usize = 1024;
/// The furthest a heartbeat may push a deadline, or a line's time go back.
const MAX_SPAN: Duration = Duration::from_secs(24 * 3600);

/// Checks the protocol header; the refusal names both versions.
fn check_protocol(headers: &http::HeaderMap) -> ApiResult<()> {
    let sent = headers
        .get(PROTOCOL_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    match sent {
        Some(v) if v == PROTOCOL.to_string() => Ok(()),
        other => Err(ApiError::Conflict(format!(
            "this replica speaks worker protocol {PROTOCOL}; the agent sent {}: \
             run agents of the replicas' Baton version",
            other.map_or("none".into(), |v| format!("`{v}`"))
        ))),
    }
}

fn check_owner(grant: &AgentGrant, agent_id: &str) -> ApiResult<()> {
    if grant.owns(agent_id) {
        return Ok(());
    }
    Err(ApiError::Forbidden(format!(
        "the agent id `{agent_id}` is not one the agent token `{}` was given",
        grant.name
    )))
}

/// Malformed labels are the request's fault (422); labels beyond the
/// token's are refused (403).
fn check_labels(grant: &AgentGrant, labels: &[String]) -> ApiResult<()> {
    crate::auth::check_labels(labels).map_err(|e| ApiError::invalid("labels", e))?;
    grant.check_labels(labels).map_err(ApiError::Forbidden)
}

fn check_text(field: &str, text: &str) -> ApiResult<String> {
    if text.chars().count() > MAX_TEXT_CHARS || text.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            field,
            format!("must be at most {MAX_TEXT_CHARS} characters without control characters"),
        ));
    }
    Ok(text.to_owned())
}

fn check_count(field: &str, n: usize, most: usize) -> ApiResult<()> {
    if n > most {
        return Err(ApiError::invalid(
            field,
            format!("{n} items are more than the {most} one call may carry"),
        ));
    }
    Ok(())
}

fn millis(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

/// `POST /api/v1/worker/hello`: names a new agent and writes its row.
pub async fn hello(
    State(state): State<ApiState>,
    Extension(grant): Extension<AgentGrant>,
    headers: http::HeaderMap,
    JsonBody(hello): JsonBody<Hello>,
) -> ApiResult<Json<Welcome>> {
    check_protocol(&headers)?;
    if hello.protocol != PROTOCOL {
        return Err(ApiError::Conflict(format!(
            "this replica speaks worker protocol {PROTOCOL}; the agent speaks {}",
            hello.protocol
        )));
    }
    check_labels(&grant, &hello.labels)?;
    if hello.workers == 0 || hello.workers as usize > MAX_WORKERS {
        return Err(ApiError::invalid(
            "workers",
            format!("must be from 1 to {MAX_WORKERS}, not {}", hello.workers),
        ));
    }
    let now = Ts::now();
    let info = ReplicaInfo {
        replica_id: format!("{AGENT_ID_PREFIX}{}-{:08x}", grant.name, fastrand::u32(..)),
        hostname: check_text("hostname", &hello.hostname)?,
        labels: hello.labels,
        version: check_text("version", &hello.version)?,
        started_at: now,
    };
    state.store.replica_upsert(&info, now).await?;
    tracing::info!(agent = %info.replica_id, host = %info.hostname, labels = ?info.labels,
        workers = hello.workers, "an agent said hello");
    let scheduler = &state.scheduler;
    Ok(Json(Welcome {
        agent_id: info.replica_id,
        protocol: PROTOCOL,
        heartbeat_interval_ms: millis(scheduler.heartbeat_interval),
        stale_after_ms: millis(scheduler.stale_after),
        run_heartbeat_timeout_ms: millis(scheduler.run_heartbeat_timeout()),
        max_log_bytes: scheduler.max_log_bytes as u64,
        started_at_micros: now.micros(),
    }))
}

/// `POST /api/v1/worker/beat`: the agent's own heartbeat; the answer
/// carries [`DRAINING_HEADER`] while an operator drains the agent.
pub async fn beat(
    State(state): State<ApiState>,
    Extension(grant): Extension<AgentGrant>,
    headers: http::HeaderMap,
    JsonBody(beat): JsonBody<AgentBeat>,
) -> ApiResult<axum::response::Response> {
    check_protocol(&headers)?;
    check_owner(&grant, &beat.agent_id)?;
    check_labels(&grant, &beat.labels)?;
    let info = ReplicaInfo {
        replica_id: beat.agent_id,
        hostname: check_text("hostname", &beat.hostname)?,
        labels: beat.labels,
        version: check_text("version", &beat.version)?,
        started_at: Ts::from_micros(beat.started_at_micros),
    };
    let draining = state.store.replica_upsert(&info, Ts::now()).await?;
    let mut answer = axum::response::IntoResponse::into_response(StatusCode::NO_CONTENT);
    if draining {
        answer
            .headers_mut()
            .insert(DRAINING_HEADER, http::HeaderValue::from_static("true"));
    }
    Ok(answer)
}

/// `POST /api/v1/worker/take`: claims what fits, waiting up to `wait_ms`
/// for a run to become AVAILABLE. The wait holds no database connection:
/// it joins the replica's [`super::TakeQueue`], which claims for waiting
/// agents when runs become AVAILABLE (its own commits and, on PostgreSQL,
/// the others' NOTIFYs), with the claimer's poll as fallback.
pub async fn take(
    State(state): State<ApiState>,
    Extension(grant): Extension<AgentGrant>,
    headers: http::HeaderMap,
    JsonBody(take): JsonBody<Take>,
) -> ApiResult<Json<Taken>> {
    check_protocol(&headers)?;
    check_owner(&grant, &take.agent_id)?;
    check_labels(&grant, &take.labels)?;
    if take.slots == 0 || take.slots as usize > MAX_WORKERS {
        return Err(ApiError::invalid(
            "slots",
            format!("must be from 1 to {MAX_WORKERS}, not {}", take.slots),
        ));
    }
    if take.wait_ms > MAX_TAKE_WAIT_MS {
        return Err(ApiError::invalid(
            "wait_ms",
            format!("must be at most {MAX_TAKE_WAIT_MS}, not {}", take.wait_ms),
        ));
    }
    let until = tokio::time::Instant::now() + Duration::from_millis(take.wait_ms);
    // A drained agent claims nothing, on the database's word rather than
    // its own: its take waits in the queue, which claims for it only once
    // the drain is lifted (or answers empty at the end of the wait).
    let draining = state
        .takes
        .drained(state.store.as_ref(), &take.agent_id)
        .await?;
    let mut available = state.store.signals().availabilities();
    // Marked seen before the claim: runs made AVAILABLE during it are
    // looked for again once the take waits.
    let seen = *available.borrow_and_update();
    let slots = i64::from(take.slots);
    let claim = Claim {
        replica_id: &take.agent_id,
        labels: &take.labels,
        limit: slots,
        heartbeat_timeout: state.scheduler.run_heartbeat_timeout(),
    };
    let mut claimed = match draining {
        true => Vec::new(),
        false => state.store.run_claim_many(&claim, Ts::now()).await?,
    };
    // A stopping replica answers at once: the agent asks another.
    if claimed.is_empty() && take.wait_ms > 0 && !state.stopping.is_cancelled() {
        claimed = state
            .takes
            .wait(&take.agent_id, &take.labels, slots, seen, until)
            .await;
    }
    let now = Ts::now();
    let runs = claimed.iter().map(|run| taken(run, now)).collect();
    Ok(Json(Taken { runs }))
}

fn taken(run: &ClaimedRun, now: Ts) -> TakenRun {
    let span = |from: Ts, to: Ts| (to.0 - from.0).num_milliseconds().max(0) as u64;
    TakenRun {
        id: run.id,
        task_id: run.task_id,
        plan_id: run.plan_id,
        attempt: run.attempt,
        executor: run.executor.clone(),
        started_ms_ago: span(run.started_at, now),
        deadline_in_ms: span(now, run.deadline),
        heartbeat_interval_ms: run.heartbeat_interval.map(millis),
        heartbeat_timeout_ms: millis(run.heartbeat_timeout),
    }
}

/// `POST /api/v1/worker/runs/beat`: pushes the deadlines of the agent's
/// runs; says which are still its own.
pub async fn beat_runs(
    State(state): State<ApiState>,
    Extension(grant): Extension<AgentGrant>,
    headers: http::HeaderMap,
    JsonBody(beats): JsonBody<RunBeats>,
) -> ApiResult<Json<RunsBeaten>> {
    check_protocol(&headers)?;
    check_owner(&grant, &beats.agent_id)?;
    check_count("beats", beats.beats.len(), MAX_WORKERS)?;
    let mut pairs = Vec::with_capacity(beats.beats.len());
    for (i, beat) in beats.beats.iter().enumerate() {
        let timeout = Duration::from_millis(beat.timeout_ms);
        if timeout.is_zero() || timeout > MAX_SPAN {
            return Err(ApiError::invalid(
                &format!("beats[{i}].timeout_ms"),
                "must be from 1 ms to a day",
            ));
        }
        pairs.push((beat.run_id, timeout));
    }
    let beaten = state
        .store
        .run_heartbeat_many(&beats.agent_id, &pairs, Ts::now())
        .await?;
    Ok(Json(RunsBeaten {
        owned: beaten.owned,
        canceling: beaten.canceling,
        held: beaten.held,
    }))
}

/// `POST /api/v1/worker/runs/log`: appends lines of one run's output.
pub async fn log(
    State(state): State<ApiState>,
    Extension(grant): Extension<AgentGrant>,
    headers: http::HeaderMap,
    JsonBody(log): JsonBody<LogLines>,
) -> ApiResult<Json<LogKept>> {
    check_protocol(&headers)?;
    check_owner(&grant, &log.agent_id)?;
    check_count("lines", log.lines.len(), MAX_LINES)?;
    let now = Ts::now();
    let mut lines = Vec::with_capacity(log.lines.len());
    for (i, line) in log.lines.iter().enumerate() {
        let stream = match line.stream.as_str() {
            "stdout" => "stdout",
            "stderr" => "stderr",
            other => {
                return Err(ApiError::invalid(
                    &format!("lines[{i}].stream"),
                    format!("must be `stdout` or `stderr`, not {other:?}"),
                ));
            }
        };
        let ago = Duration::from_millis(line.at_ms_ago).min(MAX_SPAN);
        lines.push(LogLine {
            at: now.minus(ago),
            stream,
            line: clean_line(&line.line),
        });
    }
    let owned = state
        .store
        .run_log_append(&log.agent_id, log.run_id, &lines)
        .await?;
    Ok(Json(LogKept { owned }))
}

/// `POST /api/v1/worker/finish`: records how executions ended. A finish
/// for a run that is no longer the agent's is fenced: nothing recorded.
pub async fn finish(
    State(state): State<ApiState>,
    Extension(grant): Extension<AgentGrant>,
    headers: http::HeaderMap,
    JsonBody(finishes): JsonBody<Finishes>,
) -> ApiResult<Json<Finished>> {
    check_protocol(&headers)?;
    check_owner(&grant, &finishes.agent_id)?;
    check_count("finishes", finishes.finishes.len(), MAX_WORKERS)?;
    let mut batch = Vec::with_capacity(finishes.finishes.len());
    for (i, finish) in finishes.finishes.iter().enumerate() {
        let status = match finish.status.as_str() {
            "DONE" => RunStatus::Done,
            "FAILED" => RunStatus::Failed,
            "CANCELED" => RunStatus::Canceled,
            other => {
                return Err(ApiError::invalid(
                    &format!("finishes[{i}].status"),
                    format!("must be DONE, FAILED or CANCELED, not {other:?}"),
                ));
            }
        };
        batch.push(Finish {
            run_id: finish.run_id,
            status,
            result_code: finish.result_code,
            error: finish.error.as_deref().map(clean_line),
        });
    }
    let report = state
        .store
        .run_finish_many(&finishes.agent_id, &batch, Ts::now())
        .await?;
    Ok(Json(Finished {
        finished: report.finished,
        fenced: report.fenced,
        succeeded_late: report.succeeded_late,
    }))
}

/// `POST /api/v1/worker/hand-back`: returns runs the agent will not run.
pub async fn hand_back(
    State(state): State<ApiState>,
    Extension(grant): Extension<AgentGrant>,
    headers: http::HeaderMap,
    JsonBody(back): JsonBody<HandBack>,
) -> ApiResult<Json<HandedBack>> {
    check_protocol(&headers)?;
    check_owner(&grant, &back.agent_id)?;
    check_count("run_ids", back.run_ids.len(), MAX_WORKERS)?;
    let detail = check_text("detail", &back.detail)?;
    let run_ids = state
        .store
        .run_hand_back_many(&back.agent_id, &back.run_ids, &detail, Ts::now())
        .await?;
    Ok(Json(HandedBack { run_ids }))
}

/// `POST /api/v1/worker/bye`: the agent leaves; its row goes.
pub async fn bye(
    State(state): State<ApiState>,
    Extension(grant): Extension<AgentGrant>,
    headers: http::HeaderMap,
    JsonBody(bye): JsonBody<Bye>,
) -> ApiResult<StatusCode> {
    check_protocol(&headers)?;
    check_owner(&grant, &bye.agent_id)?;
    state.store.replica_delete(&bye.agent_id).await?;
    Ok(StatusCode::NO_CONTENT)
}
