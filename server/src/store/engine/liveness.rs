//! Liveness records (docs/design.md, "Liveness"): named leases the
//! singleton loops run under, each replica's heartbeat row, and the
//! sweeper's candidates and the causes it writes; with the statements
//! both backends run for them.

use std::time::Duration;

use super::{Dialect, one, optional, read_optional};
use crate::store::engine::audit::Asked;
use crate::store::engine::reads::rows;
use crate::store::{ReplicaInfo, Result, StoreError};
use domain::time::Ts;

/// The lease the singleton loops (promoter, sweeper, pruning) run under.
pub const LEADER: &str = "leader";

/// A named lease as it stands after an acquire or read.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Lease {
    pub holder: String,
    pub acquired_at: Ts,
    pub expires_at: Ts,
}

/// Takes a free or expired lease, or renews one's own; leaves another
/// holder's live lease alone. `acquired_at` only moves on a change of hands.
/// Both backends run it in a write transaction followed by [`LEASE_GET`].
pub const LEASE_ACQUIRE: &str =
    "INSERT INTO leader_lease (name, holder, acquired_at, expires_at) VALUES ($1, $2, $3, $4)
    ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at,
        acquired_at = CASE WHEN leader_lease.holder = excluded.holder
            THEN leader_lease.acquired_at ELSE excluded.acquired_at END
    WHERE leader_lease.holder = excluded.holder OR leader_lease.expires_at <= $3";

pub const LEASE_GET: &str =
    "SELECT holder, acquired_at, expires_at FROM leader_lease WHERE name = $1";

pub const LEASE_RELEASE: &str = "DELETE FROM leader_lease WHERE name = $1 AND holder = $2";

/// Heartbeat rows older than `$1` by both stamps (the row's and one
/// recorded beside it while another client held it).
pub const REPLICA_PRUNE: &str = "DELETE FROM replica WHERE last_heartbeat < $1
    AND NOT EXISTS (SELECT 1 FROM held_replica_heartbeat h
        WHERE h.replica_id = replica.replica_id AND h.at >= $1)";

/// A sweep that waited longer than this for its table locks judges
/// nothing: heartbeats were kept waiting as long. The sweeper's other
/// statements held up as long are trouble the same way
/// (`loops::sweeper`).
pub const SWEEP_BLOCKED_AFTER: Duration = Duration::from_millis(250);

/// Heartbeats recorded beside a row another client held (PostgreSQL's
/// held-row beats, docs/design.md "Liveness") count only while their run
/// is RUNNING or their replica has a row; each sweep deletes the others.
pub const HELD_RUN_HEARTBEATS_PRUNE: &str =
    "DELETE FROM held_run_heartbeat WHERE run_id NOT IN (SELECT id FROM running_run)";
pub const HELD_REPLICA_HEARTBEATS_PRUNE: &str =
    "DELETE FROM held_replica_heartbeat WHERE replica_id NOT IN (SELECT replica_id FROM replica)";

/// RUNNING runs the sweeper must fail: replica row missing or stale,
/// heartbeat deadline or hard deadline passed. A replica's last heartbeat
/// and a run's heartbeat deadline are each the later of the row's and the
/// one recorded beside the row while another client held it
/// (`held_replica_heartbeat`, `held_run_heartbeat`). `$1` = stale since,
/// `$2` = the time verdicts are judged at. `$with` and `$stale` say which
/// replica rows look stale by their own stamp (each dialect's
/// `SWEEP_CANDIDATES`); PostgreSQL appends a row lock.
macro_rules! sweep_candidates_sql {
    ($with:literal, $stale:literal) => {
        concat!(
            $with,
            "SELECT r.id, r.replica_id, ",
            $crate::store::engine::reads::rows::later_stamp_sql!("p.last_heartbeat", "hp.at"),
            " AS last_heartbeat, ",
            $crate::store::engine::reads::rows::later_stamp_sql!(
                "r.heartbeat_deadline",
                "hr.deadline"
            ),
            " AS heartbeat_deadline, r.deadline, r.timeout_ms
            FROM running_run r LEFT JOIN replica p ON p.replica_id = r.replica_id
                LEFT JOIN held_replica_heartbeat hp ON hp.replica_id = r.replica_id
                LEFT JOIN held_run_heartbeat hr ON hr.run_id = r.id
            WHERE (p.replica_id IS NULL
                OR (",
            $stale,
            " AND (hp.at IS NULL OR hp.at < $1))
                OR (r.heartbeat_deadline < $2 AND (hr.deadline IS NULL OR hr.deadline < $2))
                OR r.deadline < $2)
            ORDER BY r.id"
        )
    };
}
pub(crate) use sweep_candidates_sql;

/// A RUNNING run that has lost its claim to liveness.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SweepCandidate {
    pub id: i64,
    pub replica_id: Option<String>,
    /// The replica's last heartbeat; `None` when its row is gone.
    pub last_heartbeat: Option<Ts>,
    pub heartbeat_deadline: Option<Ts>,
    pub deadline: Option<Ts>,
    pub timeout_ms: i64,
}

impl SweepCandidate {
    /// The FAILED run's error: which rule fired, and when. The replica's
    /// silence comes first: it is the root cause when several apply.
    pub fn cause(&self, stale_since: Ts, now: Ts) -> String {
        let replica = self.replica_id.as_deref().unwrap_or("(none)");
        match self.last_heartbeat {
            None => {
                return format!(
                    "replica {replica} is gone (no heartbeat row); its run was abandoned"
                );
            }
            Some(beat) if beat < stale_since => {
                return format!(
                    "replica {replica} stopped heart-beating at {}",
                    beat.clock()
                );
            }
            Some(_) => {}
        }
        if let Some(deadline) = self.deadline.filter(|d| *d < now) {
            let timeout = Duration::from_millis(self.timeout_ms.max(0) as u64);
            return format!(
                "timed out after {} (deadline {} passed on replica {replica})",
                humantime::format_duration(timeout),
                deadline.clock()
            );
        }
        let missed = self
            .heartbeat_deadline
            .map_or_else(|| "?".to_owned(), Ts::clock);
        format!("run heartbeat missed: replica {replica} did not extend it past {missed}")
    }
}

/// What one sweep did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SweepReport {
    /// The round waited this long for the tables (an outside client's
    /// `LOCK TABLE`, a migration) and judged nothing: while the heartbeats
    /// it would judge could not be written either, their absence is no
    /// evidence against anyone.
    pub blocked: Option<Duration>,
    /// The round closed a stretch nobody could write, this long, which
    /// verdicts discount for the next stale period.
    pub written_off: Option<Duration>,
    /// Runs moved RUNNING → FAILED, with the cause written.
    pub failed: Vec<(i64, String)>,
    /// Runs an operator had asked to cancel, moved RUNNING → CANCELED (no
    /// retry) once their replica was found stale, with the cause.
    pub canceled: Vec<(i64, String)>,
    /// New PENDING attempts created by automatic retry.
    pub retried: Vec<i64>,
    /// Plans whose notification these failures claimed.
    pub notified: Vec<crate::store::Notified>,
}

impl SweepReport {
    /// The report from the candidates seen, their causes, and the rows the
    /// conditional update actually moved.
    pub(super) fn new(
        found: &[SweepCandidate],
        causes: Vec<String>,
        done: &[rows::FinishedRow],
        retried: Vec<i64>,
        notified: Vec<crate::store::Notified>,
    ) -> Self {
        let moved: std::collections::HashMap<i64, &str> =
            done.iter().map(|d| (d.id, d.status.as_str())).collect();
        let (mut failed, mut canceled) = (Vec::new(), Vec::new());
        for (c, cause) in found.iter().zip(causes) {
            match moved.get(&c.id) {
                Some(&"CANCELED") => canceled.push((c.id, cause)),
                Some(_) => failed.push((c.id, cause)),
                None => {}
            }
        }
        SweepReport {
            blocked: None,
            written_off: None,
            failed,
            canceled,
            retried,
            notified,
        }
    }
}

/// Takes the named lease if it is free or expired, or renews it if
/// `holder` has it; returns the lease as it now stands.
pub async fn lease_acquire<D: Dialect>(
    d: &D,
    name: &str,
    holder: &str,
    ttl: Duration,
    now: Ts,
) -> Result<Lease> {
    let mut tx = d.begin_liveness().await?;
    D::execute(
        &mut tx,
        LEASE_ACQUIRE.into(),
        &[name.into(), holder.into(), now.into(), now.plus(ttl).into()],
    )
    .await?;
    let lease = one::<D, Lease>(&mut tx, LEASE_GET, &[name.into()]).await?;
    D::commit(tx).await?;
    Ok(lease)
}

/// Gives the lease up at once, if `holder` has it.
pub async fn lease_release<D: Dialect>(d: &D, name: &str, holder: &str) -> Result<()> {
    d.write(LEASE_RELEASE.into(), &[name.into(), holder.into()])
        .await?;
    Ok(())
}

pub async fn lease_get<D: Dialect>(d: &D, name: &str) -> Result<Option<Lease>> {
    read_optional(d, LEASE_GET, &[name.into()]).await
}

/// Writes the worker's heartbeat row; whether an operator drains it.
pub async fn replica_upsert<D: Dialect>(d: &D, replica: &ReplicaInfo, now: Ts) -> Result<bool> {
    let labels = serde_json::to_string(&replica.labels).unwrap_or_else(|_| "[]".into());
    let written: Result<Vec<(Option<Ts>,)>> = d
        .heartbeat_write(
            rows::REPLICA_UPSERT.into(),
            &[
                replica.replica_id.as_str().into(),
                replica.hostname.as_str().into(),
                labels.as_str().into(),
                replica.version.as_str().into(),
                replica.started_at.into(),
                now.into(),
                // The skew this process measured last (0 before any sample).
                domain::time::clock::skew().num_milliseconds().into(),
                super::queue_repair::RUN_STORAGE.into(),
            ],
        )
        .await;
    let draining = match written {
        // Still held up: the replica asks again at once.
        Err(e) if e.is_lock_wait() => {
            d.held_replica_heartbeat(&replica.replica_id, now).await?;
            return Err(e);
        }
        written => written?,
    };
    Ok(draining.first().is_some_and(|(since,)| since.is_some()))
}

/// Starts (`drain`) or ends an operator's drain of worker `worker_id`;
/// false when no such worker has a row. Draining one already draining,
/// or resuming one that is not, is refused naming its state.
pub async fn replica_drain<D: Dialect>(
    d: &D,
    worker_id: &str,
    drain: bool,
    asked: &Asked<'_>,
    now: Ts,
) -> Result<bool> {
    let mut tx = d.begin().await?;
    let state: Option<(Option<Ts>, Option<String>)> =
        optional::<D, _>(&mut tx, rows::REPLICA_DRAINING, &[worker_id.into()]).await?;
    let Some((since, by)) = state else {
        return Ok(false);
    };
    let outcome = match (drain, since) {
        (true, Some(since)) => Err(StoreError::Conflict(format!(
            "{worker_id} is already draining, since {} by {}",
            since.0.format("%Y-%m-%d %H:%M:%SZ"),
            by.unwrap_or_default()
        ))),
        (false, None) => Err(StoreError::Conflict(format!("{worker_id} is not draining"))),
        _ => Ok(()),
    };
    if outcome.is_ok() {
        let (since, by): (Option<Ts>, Option<&str>) = match drain {
            true => (Some(now), Some(asked.by.name)),
            false => (None, None),
        };
        D::execute(
            &mut tx,
            rows::REPLICA_DRAIN.into(),
            &[worker_id.into(), since.into(), by.into()],
        )
        .await?;
        asked.done::<D>(&mut tx, "", now).await?;
    }
    D::commit(tx).await?;
    outcome?;
    d.signals().touch();
    Ok(true)
}

/// The ids of every worker an operator drains (a sequential scan of a
/// table of one row per worker).
pub async fn replicas_draining<D: Dialect>(d: &D) -> Result<Vec<String>> {
    let ids: Vec<(String,)> = d
        .read(
            "SELECT replica_id FROM replica WHERE draining_since IS NOT NULL".into(),
            &[],
        )
        .await?;
    Ok(ids.into_iter().map(|(id,)| id).collect())
}

pub async fn replica_delete<D: Dialect>(d: &D, replica_id: &str) -> Result<()> {
    d.write(rows::REPLICA_DELETE.into(), &[replica_id.into()])
        .await?;
    Ok(())
}

/// Deletes heartbeat rows last written before `before`; returns how many.
pub async fn replica_prune<D: Dialect>(d: &D, before: Ts) -> Result<u64> {
    d.write(REPLICA_PRUNE.into(), &[before.into()]).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(now: Ts) -> SweepCandidate {
        SweepCandidate {
            id: 1,
            replica_id: Some("r-7f3a".into()),
            last_heartbeat: Some(now),
            heartbeat_deadline: Some(now.plus(Duration::from_secs(5))),
            deadline: Some(now.plus(Duration::from_secs(60))),
            timeout_ms: 60_000,
        }
    }

    #[test]
    fn causes_name_the_rule_and_the_time() {
        let now = Ts::from_micros(1_700_000_000_000_000);
        let stale_since = now.minus(Duration::from_secs(10));
        let mut c = candidate(now);
        c.last_heartbeat = Some(now.minus(Duration::from_secs(12)));
        assert_eq!(
            c.cause(stale_since, now),
            format!(
                "replica r-7f3a stopped heart-beating at {}",
                now.minus(Duration::from_secs(12)).clock()
            )
        );
        c.last_heartbeat = None;
        assert!(c.cause(stale_since, now).contains("is gone"));
        let mut c = candidate(now);
        c.deadline = Some(now.minus(Duration::from_secs(1)));
        assert!(c.cause(stale_since, now).starts_with("timed out after 1m"));
        let mut c = candidate(now);
        c.heartbeat_deadline = Some(now.minus(Duration::from_secs(1)));
        assert!(
            c.cause(stale_since, now)
                .starts_with("run heartbeat missed")
        );
    }
}
