//! What the pool hands out after the server dropped its connections (a
//! restart, a killed backend, a firewall forgetting an idle socket): a
//! connection idle for longer than [`PING_IDLE_AFTER`] is pinged before
//! use and replaced if it is dead, so the first statements after a quiet
//! spell do not fail.

use std::time::Duration;

use sqlx::Connection;

use super::{PING_IDLE_AFTER, PgStore};
use crate::bench::scratch::Scratch;

/// Connections the pool holds when the server drops them.
const POOLED: usize = 3;

#[tokio::test]
async fn a_connection_dropped_while_idle_is_replaced_before_use() {
    let scratch = Scratch::postgres_for_tests().await;
    let store = PgStore::connect(&scratch.url).await.expect("connect");
    let mut held = Vec::new();
    for _ in 0..POOLED {
        held.push(store.pool.acquire().await.expect("a connection"));
    }
    drop(held);

    // A session of its own ends every other backend of the database.
    let mut admin = sqlx::PgConnection::connect(&scratch.url)
        .await
        .expect("admin");
    let others =
        "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()";
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT pg_terminate_backend(pid) {others}"
    )))
    .execute(&mut admin)
    .await
    .expect("terminate");
    let mut left: i64 = 1;
    for _ in 0..100 {
        left = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) {others}")))
            .fetch_one(&mut admin)
            .await
            .expect("count");
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(left, 0, "the scratch database's backends did not end");
    assert_eq!(store.pool.num_idle(), POOLED, "the pool still holds them");

    tokio::time::sleep(PING_IDLE_AFTER + Duration::from_millis(200)).await;
    for attempt in 0..=POOLED {
        let one: i32 = sqlx::query_scalar("SELECT 1")
            .fetch_one(&store.pool)
            .await
            .unwrap_or_else(|e| {
                panic!("statement {attempt} after the server dropped the pool: {e}")
            });
        assert_eq!(one, 1);
    }
    drop(store);
    admin.close().await.expect("close");
    scratch.drop_database().await.expect("drop");
}
