//! Runs leaving RUNNING: a finish reported by the replica that executed
//! them, the sweeper failing those whose replica or deadlines lapsed
//! (docs/design.md, "Liveness"), and a replica handing its runs back as it
//! shuts down. Each is fenced: only runs still RUNNING on the expected
//! replica change.

use std::borrow::Cow;
use std::collections::HashSet;
use std::time::Duration;

use super::{Dialect, RowLock, Sql, outcomes};
use crate::store::liveness::{SweepCandidate, SweepReport};
use crate::store::signals::Signal;
use app::model::RunStatus;

use crate::store::{Finish, FinishReport, Result, Ts};

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

/// A sweep that waited longer than this for its table locks judges
/// nothing: heartbeats were kept waiting as long.
const BLOCKED_AFTER: Duration = Duration::from_millis(250);

/// Fails every RUNNING run whose replica is stale or gone, or whose
/// heartbeat deadline or hard deadline passed, with the rule that fired as
/// its error, and creates the automatic retries.
///
/// Verdicts are judged `grace` before `now`: the sweeper's own longest
/// stretch without a successful round lately (docs/design.md, "Liveness"),
/// during which nobody's heartbeat could be written either. A round that
/// had to wait for its table locks judges nothing and says so.
pub async fn run_sweep<D: Dialect>(
    d: &D,
    stale_after: Duration,
    grace: Duration,
    now: Ts,
) -> Result<SweepReport> {
    let asked = std::time::Instant::now();
    let mut tx = d.sweep_begin().await?;
    let waited = asked.elapsed();
    if waited > BLOCKED_AFTER {
        return Ok(SweepReport {
            blocked: Some(waited),
            ..SweepReport::default()
        });
    }
    let judged = now.minus(grace);
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
    if found.is_empty() {
        return Ok(SweepReport::default());
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
    Ok(SweepReport::new(&found, causes, &done, retried, notified))
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
