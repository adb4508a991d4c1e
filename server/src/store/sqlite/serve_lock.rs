//! One `baton serve` per SQLite file.
//!
//! SQLite is the one-replica deployment: wake-ups travel in memory, so a
//! second process on the same file would wait for its poll to see any
//! work, queue on the first one's write lock, and on a network file
//! system risk the file itself. A second serve is refused at start, naming
//! the process that holds the file, instead of running half-working.
//!
//! The lock is an advisory `flock` on a file beside the database (not on
//! the database: on NFS, `flock` becomes a POSIX lock that would clash with
//! SQLite's own). The kernel drops it when the process dies, however it
//! dies, so a killed replica never leaves the file locked.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};

use anyhow::Context;

/// Held for as long as the serve runs; dropping it releases the file.
pub struct ServeLock {
    _file: File,
}

impl ServeLock {
    /// Takes the lock of the database at `path`, or says who holds it.
    pub fn take(path: &str) -> anyhow::Result<ServeLock> {
        let lock_path = format!("{path}.serve-lock");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .with_context(|| format!("cannot open the lock file {lock_path}"))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                let holder = match holder.parse::<u32>() {
                    Ok(pid) => format!("process {pid}"),
                    Err(_) => "another process".to_owned(),
                };
                anyhow::bail!(
                    "another `baton serve` ({holder}) already serves the SQLite database \
                     {path}: one SQLite file takes one replica. Stop that one first, or run \
                     several replicas on PostgreSQL (docs/deploy.md)"
                );
            }
            Err(TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {lock_path}"));
            }
        }
        // For the message above, when a second serve is refused.
        file.set_len(0)?;
        file.rewind()?;
        write!(file, "{}", std::process::id())?;
        Ok(ServeLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_and_a_dropped_one_frees_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("baton.db");
        let db = db.to_str().unwrap();
        let first = ServeLock::take(db).expect("first lock");
        let refused = ServeLock::take(db)
            .err()
            .expect("second lock refused")
            .to_string();
        assert!(
            refused.contains(&format!("process {}", std::process::id())),
            "{refused}"
        );
        assert!(
            refused.contains("one SQLite file takes one replica"),
            "{refused}"
        );
        drop(first);
        ServeLock::take(db).expect("lock after the holder let go");
    }
}
