//! Runs leaving RUNNING: a finish reported by the replica that executed
//! them, the sweeper failing those whose replica or deadlines lapsed
//! (docs/design.md, "Liveness"), and a replica handing its runs back as it
//! shuts down. Each is fenced: only runs still RUNNING on the expected
//! replica change.

use std::borrow::Cow;
use std::collections::HashSet;
use std::time::Duration;

use crate::store::engine::execution::outcomes;
use crate::store::engine::liveness::{
    HELD_REPLICA_HEARTBEATS_PRUNE, HELD_RUN_HEARTBEATS_PRUNE, SWEEP_BLOCKED_AFTER, SweepCandidate,
    SweepReport,
};
use crate::store::engine::sweep_memory::SweepMemory;
use crate::store::engine::{Dialect, RowLock, Sql, gates};
use crate::store::signals::Signal;
use domain::model::RunStatus;

use crate::store::engine::reads::history_sql;
use crate::store::engine::reads::rows::FinishedRow;
use crate::store::{Finish, FinishReport, Result};
use domain::time::Ts;

/// Records how executions ended, then what follows: automatic retries and
/// the plans' notifications, in the finish's transaction.
pub async fn run_finish_many<D: Dialect>(
    d: &D,
    replica_id: &str,
    finishes: &[Finish],
    now: Ts,
) -> Result<FinishReport> {
    if finishes.is_empty() {
        return Ok(FinishReport::default());
    }
    let finishes = first_per_run(finishes);
    let (mut tx, done) = d.runs_finish(replica_id, &finishes, now).await?;
    let mut report = outcomes::finish_report(&done, &finishes);
    report.succeeded_late =
        note_late_successes::<D>(&mut tx, replica_id, &finishes, &report.fenced).await?;
    let mut done = done;
    for run_id in &report.succeeded_late {
        done.extend(retry_not_needed::<D>(&mut tx, replica_id, *run_id, now).await?);
    }
    let targets = d.notify_targets();
    let (retried, notified) = outcomes::runs_ended::<D>(&mut tx, &targets, &done, now).await?;
    D::announce(&mut tx, Signal::Changed).await?;
    let queued = outcomes::announce_deliveries::<D>(&mut tx, &notified).await?;
    D::commit(tx).await?;
    d.signals().raise(Signal::Changed);
    if queued {
        d.signals().raise(Signal::Deliveries);
    }
    Ok(FinishReport {
        retried,
        notified,
        ..report
    })
}

/// Who: a replica whose finish of a DONE execution was fenced. The
/// sweeper failed the run while its replica could not prove it alive (a
/// partition, a freeze), and the command exited 0 all the same: the run's
/// error says so, once, so nobody takes the failure for the command's.
/// Only a run failed as this replica's is noted (not one an operator
/// canceled, nor one handed back).
const NOTE_LATE_SUCCESS: &str = "UPDATE task_run SET error = COALESCE(error, '') || $3
    WHERE id = $1 AND status = 'FAILED' AND replica_id = $2
        AND (error IS NULL OR substr(error, length(error) - length($3) + 1) <> $3)";

/// Notes on each fenced run this batch finished DONE that its command
/// succeeded after all (docs/operations.md, "Liveness and failover");
/// returns the runs noted.
async fn note_late_successes<D: Dialect>(
    tx: &mut D::Tx,
    replica_id: &str,
    finishes: &[Finish],
    fenced: &[i64],
) -> Result<Vec<i64>> {
    // The common batch: nothing fenced, nothing to note or allocate.
    if fenced.is_empty() {
        return Ok(Vec::new());
    }
    let note = late_success_note(replica_id);
    let mut noted = Vec::new();
    for finish in finishes
        .iter()
        .filter(|f| f.status == RunStatus::Done && fenced.contains(&f.run_id))
    {
        // The note changes the run's error, which a stamped end reads
        // its detail from: the end becomes an event row first, as it was.
        let run = [finish.run_id.into()];
        D::execute(tx, history_sql::END_STAMP_TO_EVENT.into(), &run).await?;
        D::execute(tx, history_sql::END_STAMP_CLEAR.into(), &run).await?;
        let args = [
            finish.run_id.into(),
            replica_id.into(),
            note.as_str().into(),
        ];
        if D::execute(tx, NOTE_LATE_SUCCESS.into(), &args).await? > 0 {
            noted.push(finish.run_id);
        }
    }
    Ok(noted)
}

/// Who: a late success (above). Its task's automatic retry, if it has not
/// started: it never starts.
const UNSTARTED_RETRY: &str = "SELECT r.id, r.status FROM task_run f
    JOIN task_run r ON r.task_id = f.task_id AND r.attempt = f.attempt + 1
    WHERE f.id = $1 AND r.status IN ('PENDING', 'AVAILABLE')";

/// Ends that retry DONE without an execution, conditional on the status
/// read: a claim that got there first wins, and the retry runs.
const RETRY_NOT_RUN: &str = "UPDATE task_run
    SET status = 'DONE', finished_at = $2, waiting_cause = NULL, error = $3
    WHERE id = $1 AND status = $4
    RETURNING id, plan_id, status, task_id, attempt, max_attempts, dependents";

const RETRY_NOT_RUN_EVENT: &str = "INSERT INTO run_event
    (run_id, from_status, to_status, replica_id, actor, at, detail)
    VALUES ($1, $2, 'DONE', $3, $3, $4, $5)";

/// The late success of `run_id` is the task's success: an automatic retry
/// of it that no replica has claimed yet ends DONE, never executed, its
/// error saying why (docs/operations.md, "Liveness and failover"). The
/// task is DONE and its plan goes on as after any success. A retry already
/// claimed runs: a command is never cut off for this. Returns the retry,
/// to be ended with the batch's other runs.
async fn retry_not_needed<D: Dialect>(
    tx: &mut D::Tx,
    replica_id: &str,
    run_id: i64,
    now: Ts,
) -> Result<Option<FinishedRow>> {
    let found: Vec<(i64, String)> =
        D::fetch_all(tx, UNSTARTED_RETRY.into(), &[run_id.into()]).await?;
    let Some((retry, status)) = found.into_iter().next() else {
        return Ok(None);
    };
    let why = retry_not_run_note(run_id, replica_id);
    let args = [
        retry.into(),
        now.into(),
        why.as_str().into(),
        status.as_str().into(),
    ];
    let ended: Vec<FinishedRow> = D::fetch_all(tx, RETRY_NOT_RUN.into(), &args).await?;
    let Some(ended) = ended.into_iter().next() else {
        return Ok(None);
    };
    D::finishes_logged(tx, now, std::slice::from_ref(&ended)).await?;
    let args = [
        retry.into(),
        status.as_str().into(),
        replica_id.into(),
        now.into(),
        why.as_str().into(),
    ];
    D::execute(tx, RETRY_NOT_RUN_EVENT.into(), &args).await?;
    if status == "AVAILABLE" {
        D::execute(tx, gates::DEQUEUE.into(), &[retry.into()]).await?;
    }
    Ok(Some(ended))
}

/// Why a retry ended DONE without running.
pub fn retry_not_run_note(run_id: i64, replica_id: &str) -> String {
    format!(
        "not executed: run {run_id}, the attempt before, succeeded after all \
         (replica {replica_id} reported its exit 0 after the run was failed)"
    )
}

/// What a late success adds to its run's error.
pub fn late_success_note(replica_id: &str) -> String {
    format!(
        "; its command exited 0 all the same (replica {replica_id} reported it after the run was failed)"
    )
}

/// One finish per run, the first a batch names: a batch naming a run
/// twice ends it once, the same way on both backends (an update joined to
/// two outcomes would apply either). Batches with no repeat, all of them
/// in practice, pass through as they are.
fn first_per_run(finishes: &[Finish]) -> Cow<'_, [Finish]> {
    let mut seen = HashSet::with_capacity(finishes.len());
    if finishes.iter().all(|f| seen.insert(f.run_id)) {
        return Cow::Borrowed(finishes);
    }
    seen.clear();
    Cow::Owned(
        finishes
            .iter()
            .filter(|f| seen.insert(f.run_id))
            .cloned()
            .collect(),
    )
}

/// Fails every RUNNING run whose replica is stale or gone, or whose
/// heartbeat deadline or hard deadline passed, with the rule that fired as
/// its error, and creates the automatic retries.
///
/// Verdicts are judged before `now` by the time written off lately
/// ([`SweepMemory`], docs/design.md "Liveness"): the stretch since the last
/// round that judged, when `troubled_at` (this leader's latest round that
/// failed or waited) came after it, or one an earlier round closed. A
/// round that had to wait for its table locks judges nothing and says so.
pub async fn run_sweep<D: Dialect>(
    d: &D,
    stale_after: Duration,
    troubled_at: Option<Ts>,
    now: Ts,
) -> Result<SweepReport> {
    let asked = std::time::Instant::now();
    let mut tx = d.sweep_begin().await?;
    let waited = asked.elapsed();
    if waited > SWEEP_BLOCKED_AFTER {
        return Ok(SweepReport {
            blocked: Some(waited),
            ..SweepReport::default()
        });
    }
    // The claims whose runs all moved on, before the read of RUNNING runs
    // walks them.
    D::claim_log_compact(&mut tx).await?;
    let verdicts = SweepMemory::load::<D>(&mut tx)
        .await?
        .judge(troubled_at, stale_after, now);
    verdicts.next.store::<D>(&mut tx).await?;
    D::execute(&mut tx, HELD_RUN_HEARTBEATS_PRUNE.into(), &[]).await?;
    D::execute(&mut tx, HELD_REPLICA_HEARTBEATS_PRUNE.into(), &[]).await?;
    let judged = now.minus(verdicts.grace);
    let stale_since = judged.minus(stale_after);
    let sql = format!(
        "{} {}",
        D::SWEEP_CANDIDATES,
        D::row_lock(RowLock::SweptRuns)
    );
    let found: Vec<SweepCandidate> = D::fetch_all(
        &mut tx,
        Sql::built(sql),
        &[stale_since.into(), judged.into()],
    )
    .await?;
    let written_off = verdicts.closed;
    if found.is_empty() {
        D::commit(tx).await?;
        return Ok(SweepReport {
            written_off,
            ..SweepReport::default()
        });
    }
    let causes: Vec<String> = found.iter().map(|c| c.cause(stale_since, judged)).collect();
    let done = D::runs_fail(&mut tx, &found, &causes, now).await?;
    let targets = d.notify_targets();
    let (retried, notified) = outcomes::runs_ended::<D>(&mut tx, &targets, &done, now).await?;
    // A replica still executing one of these (a missed deadline) hears it
    // at once and stops it.
    D::announce(&mut tx, Signal::Canceled).await?;
    let queued = outcomes::announce_deliveries::<D>(&mut tx, &notified).await?;
    D::commit(tx).await?;
    d.signals().raise(Signal::Canceled);
    d.signals().raise(Signal::Changed);
    if queued {
        d.signals().raise(Signal::Deliveries);
    }
    Ok(SweepReport {
        written_off,
        ..SweepReport::new(&found, causes, &done, retried, notified)
    })
}

/// Graceful shutdown: the replica's runs go back to AVAILABLE with the
/// same attempt and the target and plan slot they hold; any replica may
/// claim them again. Returns the ids handed back.
pub async fn run_hand_back_many<D: Dialect>(
    d: &D,
    replica_id: &str,
    run_ids: &[i64],
    detail: &str,
    now: Ts,
) -> Result<Vec<i64>> {
    if run_ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut tx = d.begin().await?;
    let back = D::runs_hand_back(&mut tx, replica_id, run_ids, detail, now).await?;
    D::announce(&mut tx, Signal::Available).await?;
    D::commit(tx).await?;
    if !back.is_empty() {
        d.signals().raise(Signal::Available);
    }
    Ok(back)
}
