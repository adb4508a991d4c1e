//! Keeps the queue of AVAILABLE runs (`available_run`, docs/design.md,
//! "Run storage") true while replicas of a build older than it may still
//! write, in a rolling upgrade on PostgreSQL.
//!
//! Such a replica moves runs into and out of AVAILABLE without touching
//! the queue: a run it promotes or hands back would wait unseen by every
//! newer claimer, and a run it claims or cancels would leave its queue
//! row behind. Each replica's row says which run storage its build keeps
//! (`replica.run_storage`; an old build's row says 0). While such a row
//! exists, and for [`AFTER_LAST_SEEN`] after a replica last saw one,
//! every replica of this build rebuilds what the queue is missing from
//! the runs' statuses, once per sweep interval and whenever runs became
//! AVAILABLE (`loops::queue_repairer`). The tail covers a replica that
//! stops cleanly: it hands its runs back, then deletes its row, and a
//! repair can fall between the two. The marker is in the database
//! (`queue_repair`), so a replica that starts later honours it.
//!
//! Meanwhile this build's claimers on PostgreSQL take AVAILABLE runs from
//! `task_run` by status, as the older ones do (`CLAIM_MIXED`): a claimer
//! that waited for the repair would find the older ones had taken them.
//!
//! The repair and those claims read the AVAILABLE runs of `task_run`,
//! which has no index by status for them: a scan of the table, paid only
//! while versions are mixed (docs/deploy.md, "Rolling upgrade").
//!
//! The same window governs the logs of claims and finishes (migration
//! 0030): builds below [`RUN_STORAGE`] 2 do not write them, and a trigger
//! on `task_run` writes them for their statements. Once no such build may
//! write, the repair drops the trigger (it costs every update of
//! `task_run`); should one write again, the repair puts it back and lists
//! the RUNNING runs it claimed meanwhile.

use std::time::Duration;

use super::{Dialect, one};
use crate::store::Result;
use domain::time::Ts;

/// What `replica.run_storage` says of this build: 1, it keeps the queue
/// of AVAILABLE runs (migration 0028); 2, it also writes the logs of
/// claims and finishes (migration 0030), which the trigger there writes
/// for builds below 2 while any may write.
pub const RUN_STORAGE: i64 = 2;

/// How long replicas go on repairing after one last saw a replica row of
/// an older build.
pub const AFTER_LAST_SEEN: Duration = Duration::from_secs(60);

/// Whether a replica row of an older build exists (`$1`: this build's
/// storage), and until when repairs go on after one was last seen.
/// Also whether the trigger that writes the logs of claims and finishes
/// for older builds is still there (migrations/postgres/0030_run_logs.sql).
const OLDER_BUILDS: &str = "SELECT
    EXISTS (SELECT 1 FROM replica WHERE run_storage < $1) AS older,
    (SELECT until FROM queue_repair WHERE id = 1) AS until,
    EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'task_run_logged') AS logging_for_them";

/// RUNNING runs no claim lists: claimed by an older build while the
/// trigger was not there to log it (one frozen past its row's pruning and
/// resumed, before the repair put the trigger back). Read by status: a
/// scan, while versions are mixed only.
const LIST_UNLISTED_RUNNING: &str = "INSERT INTO claim_log (runs)
    SELECT array_agg(r.id ORDER BY r.id) FROM task_run r
    WHERE r.status = 'RUNNING' AND r.id NOT IN (SELECT unnest(c.runs) FROM claim_log c)
    HAVING COUNT(*) > 0";

/// Puts the trigger back when a replica of an older build shows up after
/// it was dropped (migrations/postgres/0030_run_logs.sql made it so). Two
/// replicas' repairs may both find it missing: the second finds it made.
const LOG_FOR_THEM: &str = "DO $$
BEGIN
    CREATE TRIGGER task_run_logged AFTER UPDATE ON task_run
        REFERENCING OLD TABLE AS old_runs NEW TABLE AS new_runs
        FOR EACH STATEMENT EXECUTE FUNCTION baton_log_runs();
EXCEPTION WHEN duplicate_object THEN NULL;
END $$";

/// How long putting the trigger back or dropping it waits for the writes
/// in flight: every write to `task_run` queues behind it meanwhile. The
/// next repair tries again.
const TRIGGER_LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '100ms'";

/// Drops that trigger once no older build may write: it costs every
/// update of `task_run` (the capture of its rows), and this build writes
/// the logs itself.
const STOP_LOGGING_FOR_THEM: [&str; 2] = [
    TRIGGER_LOCK_TIMEOUT,
    "DROP TRIGGER IF EXISTS task_run_logged ON task_run",
];

const MARK: &str = "UPDATE queue_repair SET until = $1 WHERE id = 1";

/// AVAILABLE runs an older build promoted or handed back.
const ENQUEUE_MISSING: &str = "INSERT INTO available_run (run_id, node)
    SELECT r.id, r.node FROM task_run r
    WHERE r.status = 'AVAILABLE'
        AND NOT EXISTS (SELECT 1 FROM available_run q WHERE q.run_id = r.id)
    ON CONFLICT (run_id) DO NOTHING";

/// Queue rows of runs an older build claimed, canceled or ended.
const DEQUEUE_GONE: &str = "DELETE FROM available_run
    WHERE NOT EXISTS (SELECT 1 FROM task_run r
        WHERE r.id = available_run.run_id AND r.status = 'AVAILABLE')";

/// Pins an older build dropped.
const UNPIN_DROPPED: &str = "UPDATE available_run SET node = NULL
    WHERE node IS NOT NULL AND EXISTS (SELECT 1 FROM task_run r
        WHERE r.id = available_run.run_id AND r.node IS NULL)";

/// [`STOP_LOGGING_FOR_THEM`]; a failure (the lock not had in time) is
/// only reported, and the next repair tries again.
async fn stop_logging_for_them<D: Dialect>(d: &D) {
    let dropped = async {
        let mut tx = d.begin().await?;
        for sql in STOP_LOGGING_FOR_THEM {
            D::execute(&mut tx, sql.into(), &[]).await?;
        }
        D::commit(tx).await
    };
    match dropped.await {
        Ok(()) => tracing::info!(
            "no replica of an older build is left: dropped the trigger that logged claims \
             and finishes for them"
        ),
        Err(e) => tracing::warn!(error = %e,
            "could not drop the trigger that logs claims and finishes for older builds yet"),
    }
}

#[derive(sqlx::FromRow)]
struct Older {
    older: bool,
    until: Option<Ts>,
    logging_for_them: bool,
}

/// Repairs the queue when a replica of an older build may have written
/// to it since (see the module doc): how many queue rows changed, or
/// `None` when none may have, and nothing was looked at. Always `None`
/// where one process owns the database ([`Dialect::MIXED_BUILDS`]).
pub async fn repair<D: Dialect>(d: &D, now: Ts) -> Result<Option<u64>> {
    if !D::MIXED_BUILDS {
        return Ok(None);
    }
    let mut tx = d.begin().await?;
    let seen: Older = one::<D, _>(&mut tx, OLDER_BUILDS, &[RUN_STORAGE.into()]).await?;
    let may_write = seen.older || seen.until.is_some_and(|until| until > now);
    d.shared().set_older_builds(may_write);
    if !may_write {
        if seen.logging_for_them {
            D::commit(tx).await?;
            stop_logging_for_them(d).await;
        }
        return Ok(None);
    }
    if seen.older {
        D::execute(&mut tx, MARK.into(), &[now.plus(AFTER_LAST_SEEN).into()]).await?;
    }
    if !seen.logging_for_them {
        tracing::warn!("a replica of an older build writes again: logging its claims and finishes");
        D::execute(&mut tx, TRIGGER_LOCK_TIMEOUT.into(), &[]).await?;
        D::execute(&mut tx, LOG_FOR_THEM.into(), &[]).await?;
    }
    let mut changed = 0;
    for sql in [ENQUEUE_MISSING, DEQUEUE_GONE, UNPIN_DROPPED] {
        changed += D::execute(&mut tx, sql.into(), &[]).await?;
    }
    // Not the queue's: neither counted with its rows nor a reason to wake
    // the claimers.
    if D::execute(&mut tx, LIST_UNLISTED_RUNNING.into(), &[]).await? > 0 {
        tracing::warn!("listed RUNNING runs an older build claimed while nothing logged them");
    }
    D::commit(tx).await?;
    if changed > 0 {
        d.signals().raise(crate::store::signals::Signal::Available);
    }
    Ok(Some(changed))
}
