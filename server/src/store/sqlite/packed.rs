//! Rows of the hot statements read as JSON text, one value per statement.
//!
//! sqlx hands over every value of every row as a copy of its own (a
//! `sqlite3_value_dup`, a heap allocation and its free) and every row
//! through a channel, and on SQLite that work is done on the single
//! writer's connection while the write lock is held: reading 20,000
//! PENDING runs this way took 60–80 ms of a promotion round of
//! 140–180 ms, in which no claim or finish could commit. SQLite builds
//! the same rows as one JSON array in a fraction of that, and serde_json
//! reads them back in a few milliseconds. The same goes, per batch, for
//! the runs a claim takes and a finish ends.

use std::ops::DerefMut;

use super::WriteTx;
use crate::store::engine::gates::pending_runs_sql;
use crate::store::engine::reads::rows::{ClaimRow, FinishedRow};
use crate::store::{Result, StoreError};
use domain::gates::PendingRun;
use domain::time::Ts;

/// Runs per page: about 1 MB of JSON, so a backlog of millions of
/// PENDING runs never needs one string near SQLite's length limit.
const PAGE: i64 = 10_000;

/// One page of `Dialect::PENDING_RUNS`: the runs after id `$1`, oldest
/// first, at most `$2`, as one JSON array of arrays. Both halves of the
/// union are read in id order from their indexes and merged, the id bound
/// pushed into each (`EXPLAIN QUERY PLAN`: `MERGE (UNION ALL)`).
const PENDING_PAGE: &str = concat!(
    "SELECT json_group_array(json_array(id, task_id, plan_id, target, exclusive, version,
        node, run_at, waiting_cause, parallel_limit, created_at, reassign_after_ms,
        dependents, held, approval_pending, attempt))
    FROM (SELECT * FROM (",
    pending_runs_sql!("TRUE"),
    ") WHERE id > $1 ORDER BY id LIMIT $2)"
);

/// A row of [`PENDING_PAGE`]: SQLite's booleans are 0 or 1, its times
/// microseconds.
type PackedRun = (
    i64,
    i64,
    i64,
    String,
    i64,
    Option<String>,
    Option<String>,
    Option<i64>,
    Option<String>,
    Option<i64>,
    i64,
    Option<i64>,
    i64,
    i64,
    i64,
    i64,
);

/// Every PENDING run a round considers.
pub async fn pending_runs(tx: &mut WriteTx) -> Result<Vec<PendingRun>> {
    pending_runs_paged(tx, PAGE).await
}

async fn pending_runs_paged(tx: &mut WriteTx, page: i64) -> Result<Vec<PendingRun>> {
    let mut runs = Vec::new();
    let mut after = 0_i64;
    loop {
        let text: String = sqlx::query_scalar(PENDING_PAGE)
            .bind(after)
            .bind(page)
            .fetch_one(&mut **tx.deref_mut())
            .await?;
        let rows: Vec<PackedRun> = parse(&text, "a page of PENDING runs")?;
        // The page's largest id, not its last: an aggregate's order is
        // SQLite's choice, the page's rows are not.
        let next = rows.iter().map(|r| r.0).max();
        let full = rows.len() as i64 == page;
        runs.extend(rows.into_iter().map(unpack));
        match next {
            Some(last) if full => after = last,
            _ => return Ok(runs),
        }
    }
}

/// The claimed runs of `SqliteStore::runs_claim`, in id order: `id,
/// task_id, plan_id, attempt, started_at, deadline, dependents, executor,
/// heartbeat_interval_ms, heartbeat_timeout_ms`.
pub fn claimed_rows(json: &str) -> Result<Vec<ClaimRow>> {
    type Packed = (i64, i64, i64, i64, i64, i64, i64, String, Option<i64>, i64);
    let rows: Vec<Packed> = parse(json, "the claimed runs")?;
    let mut rows: Vec<ClaimRow> = rows
        .into_iter()
        .map(|r| ClaimRow {
            id: r.0,
            task_id: r.1,
            plan_id: r.2,
            attempt: r.3,
            started_at: Ts::from_micros(r.4),
            deadline: Ts::from_micros(r.5),
            dependents: r.6 != 0,
            executor: r.7,
            heartbeat_interval_ms: r.8,
            heartbeat_timeout_ms: r.9,
        })
        .collect();
    rows.sort_unstable_by_key(|r| r.id);
    Ok(rows)
}

/// The runs a finish ends, with their new status: `id, plan_id, status,
/// task_id, attempt, max_attempts, dependents`.
pub fn finished_rows(json: &str) -> Result<Vec<FinishedRow>> {
    type Packed = (i64, i64, String, i64, i64, i64, i64);
    let rows: Vec<Packed> = parse(json, "the finished runs")?;
    Ok(rows
        .into_iter()
        .map(|r| FinishedRow {
            id: r.0,
            plan_id: r.1,
            status: r.2,
            task_id: r.3,
            attempt: r.4,
            max_attempts: r.5,
            dependents: r.6 != 0,
        })
        .collect())
}

fn parse<T: serde::de::DeserializeOwned>(json: &str, what: &str) -> Result<T> {
    serde_json::from_str(json).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

fn unpack(row: PackedRun) -> PendingRun {
    let (
        id,
        task_id,
        plan_id,
        target,
        exclusive,
        version,
        node,
        run_at,
        waiting_cause,
        parallel_limit,
        created_at,
        reassign_after_ms,
        dependents,
        held,
        approval_pending,
        attempt,
    ) = row;
    PendingRun {
        id,
        task_id,
        plan_id,
        target,
        exclusive: exclusive != 0,
        version,
        node,
        run_at: run_at.map(Ts::from_micros),
        waiting_cause,
        parallel_limit,
        created_at: Ts::from_micros(created_at),
        reassign_after_ms,
        dependents: dependents != 0,
        held: held != 0,
        approval_pending: approval_pending != 0,
        attempt,
        plan_paused_by: None,
        plan_paused_at: None,
        target_paused_by: None,
        target_paused_at: None,
        target_capacity: None,
    }
}

#[cfg(test)]
mod tests {
    use super::pending_runs_paged;
    use crate::bench::scratch::Scratch;
    use crate::plan::parse_json;
    use crate::store::Store;
    use crate::store::engine::Dialect;
    use crate::store::sqlite::SqliteStore;
    use domain::gates::PendingRun;
    use domain::time::Ts;

    /// What sqlx reads of a run, field by field, as the packed read must.
    fn fields(r: &PendingRun) -> String {
        format!("{r:?}")
    }

    /// Pages of 1 to 10,000 over runs that fill every column the JSON carries:
    /// hostile text, NULLs and both halves of the union (held versioned
    /// runs come from the second), against the plain read of the rows.
    #[tokio::test]
    async fn the_packed_read_is_the_plain_read() {
        let scratch = Scratch::sqlite().await.expect("scratch");
        let path = scratch.url.trim_start_matches("sqlite://").to_owned();
        let store = SqliteStore::open(&path).await.expect("open");
        Store::migrate(&store).await.expect("migrate");
        let hostile = "db/\"quoted\" \\ back ünï 🚀 '; DROP TABLE task_run; --";
        let cause = "a cause \"quoted\"\nover two lines\t\\ ünï 🚀";
        let plan = serde_json::json!({
            "name": "packed",
            "parallel_limit": 3,
            "tasks": [
                {"name": "a", "target": hostile, "sleep": "0s", "version": "0001"},
                {"name": "b", "target": hostile, "sleep": "0s", "version": "0002",
                 "depends_on": ["a"]},
                {"name": "c", "target": "db/c", "sleep": "0s", "exclusive": true,
                 "run_at": "2030-01-01T00:00:00Z"},
                {"name": "d", "target": "db/d", "sleep": "0s", "node": "n\"1",
                 "reassign_after": "5m"},
                {"name": "e", "target": "db/e", "sleep": "0s", "approval": "required",
                 "depends_on": ["c"]},
                {"name": "f", "target": "db/f", "sleep": "0s", "version": "0003",
                 "depends_on": ["d"]},
                {"name": "g", "target": "db/g", "sleep": "0s", "exclusive": false,
                 "approval": "required"},
            ],
        });
        let plan = parse_json(plan.to_string().as_bytes()).expect("a valid plan");
        store
            .plan_insert(&plan, "test".into(), Ts::now())
            .await
            .expect("submitted");
        sqlx::query("UPDATE task_run SET waiting_cause = $1 WHERE id % 2 = 0")
            .bind(cause)
            .execute(&store.pool)
            .await
            .expect("causes");

        let mut tx = store.begin().await.expect("begin");
        let mut plain: Vec<PendingRun> =
            SqliteStore::fetch_all(&mut tx, <SqliteStore as Dialect>::PENDING_RUNS.into(), &[])
                .await
                .expect("the plain read");
        plain.sort_by_key(|r| r.id);
        // `e` is held and has no version: no round reads it.
        assert_eq!(plain.len(), 6, "every run a round reads: {plain:?}");
        assert!(
            plain.iter().any(|r| r.held),
            "a held run is read: {plain:?}"
        );
        assert!(plain.iter().any(|r| r.approval_pending && !r.exclusive));
        for page in [1, 3, 7, 8, 10_000] {
            let mut packed = pending_runs_paged(&mut tx, page)
                .await
                .expect("the packed read");
            packed.sort_by_key(|r| r.id);
            assert_eq!(
                packed.iter().map(fields).collect::<Vec<_>>(),
                plain.iter().map(fields).collect::<Vec<_>>(),
                "pages of {page}"
            );
        }
    }
}
