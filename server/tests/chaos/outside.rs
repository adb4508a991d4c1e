//! An outside client misbehaving on the database every replica uses: it
//! holds a lock (a whole table, or one row `FOR UPDATE`) for a while, or
//! kills every other connection (`pg_terminate_backend`) again and again.
//! A database nobody could write to is no evidence against a replica
//! (docs/design.md, "Liveness"): no replica whose process lives may lose
//! its runs to these, and no command that exited may run again.

use std::time::{Duration, Instant};

use sqlx::Connection;

/// Runs `lock` in a transaction held open for `hold`.
pub async fn hold(url: &str, lock: &str, hold: Duration) {
    let mut outside = sqlx::PgConnection::connect(url).await.unwrap();
    let mut tx = outside.begin().await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(lock.to_owned()))
        .execute(&mut *tx)
        .await
        .unwrap();
    tokio::time::sleep(hold).await;
    tx.commit().await.unwrap();
}

/// Terminates every other client connection every 300 ms for `lasting`.
pub async fn kill_connections(url: &str, lasting: Duration) {
    let mut outside = sqlx::PgConnection::connect(url).await.unwrap();
    let until = Instant::now() + lasting;
    while Instant::now() < until {
        crate::common::kill_other_connections(&mut outside).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
