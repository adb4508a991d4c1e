//! `baton bench`: runs submitted while in-process replicas or real `baton
//! serve` processes (`--processes N`) work, and a full queue burned down
//! by them, each on a scratch PostgreSQL database that is gone
//! afterwards; bad settings are refused before anything is created.

mod common;

use std::process::Output;

use common::postgres_admin_url;
use sqlx::Connection;

async fn bench(database_url: &str, args: &[&str]) -> (Output, u32) {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("bench")
        .args(args)
        .env("BATON_DATABASE_URL", database_url)
        .env_remove("RUST_BACKTRACE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run baton bench");
    let pid = child.id().expect("a running child has a pid");
    (child.wait_with_output().await.expect("baton bench"), pid)
}

/// `baton bench` with `args` on the test server, which must succeed: its
/// standard output and its pid.
async fn bench_succeeds(args: &[&str]) -> (String, u32) {
    let (out, pid) = bench(&postgres_admin_url(), args).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "exit {:?}: {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (stdout, pid)
}

/// Scratch databases `baton bench` process `pid` left on the server.
async fn scratch_databases_of(pid: u32) -> Vec<String> {
    let mut admin = sqlx::PgConnection::connect(&postgres_admin_url())
        .await
        .expect("connect to the test PostgreSQL");
    sqlx::query_scalar("SELECT datname::text FROM pg_database WHERE datname LIKE $1")
        .bind(format!("baton\\_scratch\\_{pid}\\_%"))
        .fetch_all(&mut admin)
        .await
        .expect("list databases")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_work_both_phases_and_leave_no_database() {
    let (stdout, pid) = bench_succeeds(&[
        "--processes",
        "2",
        "--runs",
        "300",
        "--plans",
        "3",
        "--targets",
        "7",
    ])
    .await;
    assert!(
        stdout.contains("PostgreSQL, 2 baton serve processes x 2048 workers"),
        "{stdout}"
    );
    for phase in [
        "end to end, 2 processes: 300 runs submitted in ",
        "full queue, 2 processes: 300 runs submitted before",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(phase))
            .unwrap_or_else(|| panic!("no line starting {phase:?} in:\n{stdout}"));
        let rate: f64 = line
            .split(" -> ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no runs/s in {line}"));
        assert!(rate > 0.0, "{line}");
        // Linux: the CPU split is read from /proc, so it is there.
        assert!(
            line.contains("µs CPU/run; cores busy: PostgreSQL "),
            "{line}"
        );
        assert!(!line.contains("PostgreSQL -"), "{line}");
        assert!(!line.contains("replicas -"), "{line}");
    }
    // Each phase says who ran its runs: every run counted once (with so
    // few runs the leader may have run them all).
    let shares: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("  runs per process: the leader "))
        .collect();
    assert_eq!(shares.len(), 2, "{stdout}");
    for share in shares {
        let (leader, others) = share.split_once("; the others ").expect(share);
        let ran: u64 = std::iter::once(leader)
            .chain(others.split(", "))
            .filter(|n| *n != "none")
            .map(|n| n.parse::<u64>().unwrap_or_else(|_| panic!("{share}")))
            .sum();
        assert_eq!(ran, 300, "{share}");
    }
    assert_eq!(scratch_databases_of(pid).await, Vec::<String>::new());
}

/// The in-process bench: latency, end to end, then a full queue burned
/// down by replicas that first warmed their pools on other runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_replicas_warm_up_then_burn_down_a_full_queue() {
    let (stdout, pid) = bench_succeeds(&[
        "--runs",
        "300",
        "--plans",
        "3",
        "--targets",
        "7",
        "--latency-samples",
        "3",
        "--warm-up-runs",
        "150",
    ])
    .await;
    let lines: Vec<&str> = stdout.lines().collect();
    let position = |start: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no line starting {start:?} in:\n{stdout}"))
    };
    let warm_up = position("full queue: warm-up of 150 runs, replicas stopped after ");
    let burn_down = position("full queue: 300 runs queued before the replicas started, all DONE ");
    assert!(position("submit -> RUNNING, idle, 3 samples: p50 ") < warm_up);
    assert!(position("throughput: 300 runs, 3 plans, 7 targets, shared: ") < warm_up);
    assert!(warm_up < position("full queue: 300 runs submitted in "));
    assert!(warm_up < burn_down);
    assert!(
        lines[burn_down].contains(" runs/s; machine busy "),
        "{}",
        lines[burn_down]
    );
    assert_eq!(scratch_databases_of(pid).await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_process_settings_are_refused_naming_them() {
    for (url, args, says) in [
        (
            postgres_admin_url(),
            vec!["--processes", "0"],
            "--processes must be between 1 and 64",
        ),
        (
            postgres_admin_url(),
            vec!["--processes", "65"],
            "--processes must be between 1 and 64",
        ),
        (
            "sqlite://bench-refused.db".to_owned(),
            vec!["--processes", "2"],
            "--processes needs several processes on one database",
        ),
        (
            postgres_admin_url(),
            vec!["--processes", "2", "--replicas", "2"],
            "cannot be used with",
        ),
        (
            postgres_admin_url(),
            vec!["--processes", "lots"],
            "invalid value 'lots' for '--processes",
        ),
    ] {
        let (out, pid) = bench(&url, &args).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert_eq!(scratch_databases_of(pid).await, Vec::<String>::new());
    }
    assert!(!std::path::Path::new("bench-refused.db").exists());
}
