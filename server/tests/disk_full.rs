//! A replica whose SQLite database fills its disk recovers by itself once
//! space is freed: submits are refused with 503 while it is full, `/readyz`
//! says so from the first failed write, and afterwards every submit
//! succeeds again without a restart. A hostile trial saw a replica answer
//! 500 to every submit for over a minute after the space came back ("begin
//! at non-zero transaction depth": a pooled connection whose failed commit
//! left it believing it was still in a transaction) until it was
//! restarted.
//!
//! The disk is a 16 MiB tmpfs mounted for the test (the test runs as root,
//! as `scripts/test.sh` on this kind of machine does).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::eventually;
use common::process::{Baton, Options};
use serde_json::json;

/// A tmpfs of `size` mounted on a fresh directory; unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "could not mount a tmpfs on {} ({status}); this test needs root",
            dir.path().display()
        );
        SmallDisk { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Writes a file of zeros until the disk is full; returns its path.
fn fill(disk: &SmallDisk) -> PathBuf {
    use std::io::Write;
    let ballast = disk.path().join("ballast");
    let mut file = std::fs::File::create(&ballast).unwrap();
    let block = vec![0u8; 16 * 1024];
    while file.write_all(&block).is_ok() {}
    let _ = file.flush();
    ballast
}

fn plan(i: usize) -> serde_json::Value {
    json!({"name": format!("p{i}"), "description": "x".repeat(4000),
           "tasks": [{"name": "t", "target": format!("t{i}"), "sleep": "0s"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_disk_refuses_with_503_and_recovers_without_a_restart() {
    let disk = SmallDisk::mount("16m");
    let url = format!("sqlite://{}", disk.path().join("baton.db").display());
    let options = Options::default()
        .env("BATON_HEARTBEAT_INTERVAL", "200ms")
        .env("BATON_STALE_AFTER", "2s")
        .env("BATON_LEADER_LEASE", "1s")
        .env("BATON_SHUTDOWN_GRACE", "1s");
    let mut baton = Baton::start(&url, &options).await;
    let (status, _) = baton.post_json("/api/v1/plans", Some(plan(0))).await;
    assert!(status.is_success(), "{status}");

    let ballast = fill(&disk);
    // Submits until the disk refuses one; each refusal is 503 (try again),
    // never 500, and /readyz agrees. Its probe is a small write (the
    // replica's row), which SQLite may still fit into log space a
    // checkpoint freed while a 4 KB plan does not fit: ready is then true
    // of small writes, so it must say 503 for most refusals, not all.
    let mut refused = 0;
    let mut unready = 0;
    let mut answers = Vec::new();
    for i in 1..200 {
        let (status, body) = baton.post_json("/api/v1/plans", Some(plan(i))).await;
        if status.is_success() {
            continue;
        }
        assert_eq!(status, 503, "a full disk is no server fault: {body}");
        refused += 1;
        let (ready, body) = baton.get_json("/readyz").await;
        assert!(
            ready == 503 || ready == 200,
            "/readyz answered {ready}: {body}"
        );
        unready += usize::from(ready == 503);
        answers.push(body);
        if refused >= 5 {
            break;
        }
    }
    assert!(refused >= 5, "the disk never filled");
    eprintln!("/readyz said 503 for {unready} of {refused} refused submits");
    assert!(
        unready >= 3,
        "ready while writes fail ({unready} of {refused} refusals): {answers:?}"
    );

    std::fs::remove_file(&ballast).unwrap();
    // Ready again by itself within a few heartbeats, and then every
    // submit succeeds.
    eventually(
        Duration::from_secs(10),
        "/readyz 200 after the space came back",
        || async { (baton.get_json("/readyz").await.0 == 200).then_some(()) },
    )
    .await;
    for i in 200..230 {
        let (status, body) = baton.post_json("/api/v1/plans", Some(plan(i))).await;
        assert!(
            status.is_success(),
            "submit {i} after recovery: {status} {body}"
        );
    }
    let started = Instant::now();
    let exit = baton.sigterm_and_wait(Duration::from_secs(10)).await;
    assert!(exit.success(), "{exit}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
