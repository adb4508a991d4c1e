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

use std::time::Duration;

use super::{Dialect, one};
use crate::store::Result;
use domain::time::Ts;

/// What `replica.run_storage` says of this build: it keeps the queue of
/// AVAILABLE runs (migration 0028).
pub const RUN_STORAGE: i64 = 1;

/// How long replicas go on repairing after one last saw a replica row of
/// an older build.
pub const AFTER_LAST_SEEN: Duration = Duration::from_secs(60);

/// Whether a replica row of an older build exists (`$1`: this build's
/// storage), and until when repairs go on after one was last seen.
const OLDER_BUILDS: &str = "SELECT
    EXISTS (SELECT 1 FROM replica WHERE run_storage < $1) AS older,
    (SELECT until FROM queue_repair WHERE id = 1) AS until";

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

#[derive(sqlx::FromRow)]
struct Older {
    older: bool,
    until: Option<Ts>,
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
        return Ok(None);
    }
    if seen.older {
        D::execute(&mut tx, MARK.into(), &[now.plus(AFTER_LAST_SEEN).into()]).await?;
    }
    let mut changed = 0;
    for sql in [ENQUEUE_MISSING, DEQUEUE_GONE, UNPIN_DROPPED] {
        changed += D::execute(&mut tx, sql.into(), &[]).await?;
    }
    D::commit(tx).await?;
    if changed > 0 {
        d.signals().raise(crate::store::signals::Signal::Available);
    }
    Ok(Some(changed))
}
