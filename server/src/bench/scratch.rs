//! Throw-away databases for tests and `baton bench`: a fresh PostgreSQL
//! database (dropped afterwards) or a SQLite file in a temporary directory.

use std::sync::Arc;

use anyhow::Context;
use sqlx::Connection;
use sqlx::postgres::PgConnection;

use crate::store::{PgStore, SqliteStore, Store, redact};

/// A migrated, empty database that disappears when dropped (PostgreSQL:
/// call [`Scratch::drop_database`] for a clean removal).
pub struct Scratch {
    pub url: String,
    admin_url: Option<String>,
    name: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl Scratch {
    /// A fresh database of the backend `url` names: a new database on that
    /// PostgreSQL server, or else a temporary SQLite file.
    pub async fn new(url: &str) -> anyhow::Result<Self> {
        if url.starts_with("postgres") {
            Self::postgres(url).await
        } else {
            Self::sqlite().await
        }
    }

    /// A fresh SQLite file.
    pub async fn sqlite() -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("baton-").tempdir()?;
        let url = format!("sqlite://{}", dir.path().join("baton.db").display());
        Ok(Scratch {
            url,
            admin_url: None,
            name: None,
            _dir: Some(dir),
        })
    }

    /// A fresh database on the PostgreSQL server `admin_url` points at.
    pub async fn postgres(admin_url: &str) -> anyhow::Result<Self> {
        let name = format!(
            "baton_scratch_{}_{:08x}",
            std::process::id(),
            fastrand::u32(..)
        );
        let mut admin = PgConnection::connect(admin_url)
            .await
            .with_context(|| format!("cannot reach PostgreSQL at {}", redact(admin_url)))?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await?;
        let url = with_database(admin_url, &name);
        Ok(Scratch {
            url,
            admin_url: Some(admin_url.to_owned()),
            name: Some(name),
            _dir: None,
        })
    }

    /// A fresh database on the test server: `BATON_TEST_DATABASE_URL`, else
    /// the local one `scripts/test.sh` makes sure of.
    #[cfg(test)]
    pub async fn postgres_for_tests() -> Self {
        let admin = std::env::var("BATON_TEST_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        Self::postgres(&admin)
            .await
            .expect("a PostgreSQL test server (scripts/test.sh starts one)")
    }

    /// Opens a new store (its own pool) on this database, migrated.
    pub async fn store(&self) -> anyhow::Result<Arc<dyn Store>> {
        let store: Arc<dyn Store> = if self.admin_url.is_some() {
            Arc::new(PgStore::connect(&self.url).await?)
        } else {
            Arc::new(SqliteStore::open(self.url.trim_start_matches("sqlite://")).await?)
        };
        store.migrate().await?;
        Ok(store)
    }

    /// `n` stores, each with its own pool, as `n` replicas would have.
    pub async fn stores(&self, n: usize) -> anyhow::Result<Vec<Arc<dyn Store>>> {
        let mut stores = Vec::with_capacity(n);
        for _ in 0..n {
            stores.push(self.store().await?);
        }
        Ok(stores)
    }

    /// Drops these indexes (A/B of an index's cost: `baton bench
    /// --drop-index`). Names are plain identifiers, checked here.
    pub async fn drop_indexes(&self, names: &[String]) -> anyhow::Result<()> {
        for name in names {
            anyhow::ensure!(
                !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "`{name}` is not an index name (lower-case letters, digits, _)"
            );
            let sql = sqlx::AssertSqlSafe(format!("DROP INDEX {name}"));
            if self.admin_url.is_some() {
                let mut c = PgConnection::connect(&self.url).await?;
                sqlx::query(sql).execute(&mut c).await?;
            } else {
                let mut c = sqlx::sqlite::SqliteConnection::connect(&self.url).await?;
                sqlx::query(sql).execute(&mut c).await?;
            }
        }
        Ok(())
    }

    /// Transactions committed or rolled back in this database so far, as
    /// PostgreSQL's statistics count them (`bench --live` measures the
    /// dashboard's cost with it); `None` on SQLite, which counts nothing.
    /// Backends report their counts lazily (within about a second when
    /// busy), so compare samples over windows of several seconds.
    pub async fn transactions(&self) -> anyhow::Result<Option<i64>> {
        if self.admin_url.is_none() {
            return Ok(None);
        }
        let mut c = PgConnection::connect(&self.url).await?;
        let (n,): (i64,) = sqlx::query_as(
            "SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database \
             WHERE datname = current_database()",
        )
        .fetch_one(&mut c)
        .await?;
        Ok(Some(n))
    }

    /// Drops a PostgreSQL scratch database (closing other connections).
    pub async fn drop_database(&self) -> anyhow::Result<()> {
        if let (Some(admin_url), Some(name)) = (&self.admin_url, &self.name) {
            let mut admin = PgConnection::connect(admin_url).await?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .execute(&mut admin)
            .await?;
        }
        Ok(())
    }
}

/// The same server URL with another database name.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_part = &base[scheme_end..];
    let server = match host_part.find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    format!("{server}/{name}{query}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn swaps_the_database_name() {
        assert_eq!(
            super::with_database("postgres://postgres@127.0.0.1:5432/postgres", "x"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(super::with_database("postgres://h", "x"), "postgres://h/x");
        assert_eq!(
            super::with_database("postgres://h/db?sslmode=disable", "x"),
            "postgres://h/x?sslmode=disable"
        );
    }
}
