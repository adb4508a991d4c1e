//! Copies SQLite's write-ahead log into the database file from a task of
//! its own.
//!
//! Left to itself, SQLite checkpoints inside whichever commit pushes the
//! WAL past `wal_autocheckpoint` pages, and that commit then waits for two
//! fsyncs (10–15 ms each on this kind of VM, seen with strace): those were
//! the slowest 2 % of submit → RUNNING latencies. Here a background task
//! checkpoints every [`INTERVAL`] instead, so commits only append to the
//! WAL. PASSIVE never waits for readers or writers, and with nothing new in
//! the WAL it returns without touching the disk. SQLite's own checkpoint
//! stays as a backstop at [`BACKSTOP_PAGES`], in case this task falls
//! behind.

use std::time::Duration;

use sqlx::SqlitePool;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

/// `wal_autocheckpoint` for every connection: 40 MB of 4 KiB pages, ten
/// times SQLite's default, so the background task nearly always comes first.
pub const BACKSTOP_PAGES: &str = "10000";

const INTERVAL: Duration = Duration::from_millis(250);

/// The checkpoint task of one store; stops when dropped with it.
pub struct Checkpointer(JoinHandle<()>);

impl Checkpointer {
    pub fn start(pool: SqlitePool) -> Self {
        Checkpointer(tokio::spawn(async move {
            let mut tick = tokio::time::interval(INTERVAL);
            tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if pool.is_closed() {
                    return;
                }
                if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                    .execute(&pool)
                    .await
                {
                    tracing::warn!(error = %e, "WAL checkpoint failed; SQLite's own checkpoint still runs");
                }
            }
        }))
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};

    use super::{BACKSTOP_PAGES, Checkpointer};

    /// Rows written stay in the WAL (far below the backstop) until the task
    /// copies them: the database file itself grows only through it.
    #[tokio::test]
    async fn the_task_moves_committed_pages_into_the_database_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal.db");
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .pragma("wal_autocheckpoint", BACKSTOP_PAGES);
        let pool = SqlitePoolOptions::new()
            .max_connections(2)
            .connect_with(options)
            .await
            .unwrap();
        sqlx::raw_sql(
            "CREATE TABLE t (x BLOB);
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
            INSERT INTO t SELECT randomblob(1000) FROM n;",
        )
        .execute(&pool)
        .await
        .unwrap();
        let file_size = || std::fs::metadata(&path).unwrap().len();
        assert!(
            file_size() < 100_000,
            "before any checkpoint the rows are only in the WAL ({} bytes in the file)",
            file_size()
        );

        let _task = Checkpointer::start(pool.clone());
        let deadline = Instant::now() + Duration::from_secs(10);
        while file_size() < 2_000_000 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            file_size() >= 2_000_000,
            "the checkpoint task copied the 2 MB of rows into the file ({} bytes)",
            file_size()
        );
    }
}
