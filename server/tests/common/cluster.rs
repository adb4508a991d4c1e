//! A PostgreSQL cluster of a test's own, made with the local
//! `initdb`/`pg_ctl` in a temporary directory, for tests that stop and
//! restart the database (the shared test server is left alone).
//! `scripts/test.sh` makes sure those programs are installed.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::process::free_port;

/// A PostgreSQL cluster in a temporary directory, stopped when dropped.
pub struct Cluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
}

impl Cluster {
    pub fn start() -> Cluster {
        let bin = pg_bin().expect("initdb not found: install Debian's postgresql package");
        let dir = tempfile::Builder::new()
            .prefix("baton-pg-")
            .tempdir()
            .unwrap();
        if is_root() {
            // initdb and the server refuse to run as root.
            run(Command::new("chown").arg("postgres:").arg(dir.path()));
        }
        let data = dir.path().join("data");
        run(as_postgres(&bin.join("initdb")).arg("-D").arg(&data).args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
        ]));
        let cluster = Cluster {
            bin,
            dir,
            port: free_port(),
        };
        cluster.pg_ctl_start();
        cluster
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn pg_ctl_start(&self) {
        run(as_postgres(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .arg("-o")
            .arg(format!(
                "-p {} -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off",
                self.port
            ))
            .args(["-w", "start"]));
    }

    pub fn pg_ctl_stop(&self, mode: &str) {
        run(as_postgres(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.data())
            .args(["-m", mode, "-w", "stop"]));
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = as_postgres(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "stop"])
            .output();
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn as_postgres(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn run(command: &mut Command) {
    let out = command.output().expect("run a PostgreSQL tool");
    assert!(
        out.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The directory of `initdb`: on PATH, or Debian's newest.
fn pg_bin() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("initdb"))
            .find(|p| p.is_file())
    });
    if let Some(initdb) = on_path {
        return initdb.parent().map(Path::to_path_buf);
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("bin"))
        .filter(|bin| bin.join("initdb").is_file())
        .collect();
    versions.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
    });
    versions.pop()
}
