//! The command supervisor on its own (`baton __baton-supervise`), with real
//! processes: it ends the program and the program's children when its feed
//! closes or goes quiet, passes the program's exit status through, and
//! takes the program down if it is itself killed.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use baton::executor::supervisor::{CANNOT_START, SUPERVISE_ARG};

/// A supervisor running `script` in `sh`, allowed to go `quiet_ms` without
/// a feed; the script must first print the pids to watch, one line.
fn supervise(quiet_ms: u64, script: &str) -> (Child, ChildStdin, Vec<i32>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args([SUPERVISE_ARG, &quiet_ms.to_string(), "sh", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // As the replica starts it: leading a group of its own.
        .process_group(0)
        .spawn()
        .unwrap();
    let feed = child.stdin.take().unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    let pids: Vec<i32> = first
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    // Every test waits for these to be gone: with none, a program that
    // never started would pass.
    assert!(
        !pids.is_empty(),
        "the program printed no pid: it did not start"
    );
    (child, feed, pids)
}

/// Running: it exists and is not a zombie waiting to be reaped.
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(") ")
                .map(|(_, rest)| !rest.starts_with('Z'))
        })
        .unwrap_or(false)
}

fn wait_until_gone(pids: &[i32], within: Duration) -> Duration {
    let start = Instant::now();
    while pids.iter().any(|p| running(*p)) {
        assert!(start.elapsed() < within, "still running: {pids:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    start.elapsed()
}

/// The shell and a grandchild `sleep`, both printed first.
const SHELL_AND_CHILD: &str = "sleep 60 & echo $$ $!; wait";

#[test]
fn a_closed_feed_kills_the_program_and_its_children() {
    let (mut child, feed, pids) = supervise(60_000, SHELL_AND_CHILD);
    assert!(pids.iter().all(|p| running(*p)));
    drop(feed); // what the kernel does when the replica dies
    wait_until_gone(&pids, Duration::from_secs(5));
    assert!(!child.wait().unwrap().success());
    let mut said = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut said).unwrap();
    assert!(said.contains("the replica is gone"), "{said}");
}

#[test]
fn a_quiet_feed_kills_within_the_margin_and_a_fed_one_does_not() {
    let (mut child, mut feed, pids) = supervise(300, SHELL_AND_CHILD);
    // Fed well within the margin, it lives on past it.
    for _ in 0..10 {
        feed.write_all(b".").unwrap();
        std::thread::sleep(Duration::from_millis(60));
    }
    assert!(pids.iter().all(|p| running(*p)), "fed, so alive");
    // Then silence, as from a frozen replica (the pipe stays open).
    let took = wait_until_gone(&pids, Duration::from_secs(5));
    assert!(
        took < Duration::from_secs(2),
        "killed {took:?} into the silence"
    );
    assert!(!child.wait().unwrap().success());
    drop(feed);
}

#[test]
fn the_programs_exit_status_passes_through() {
    let status = |script: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
            .args([SUPERVISE_ARG, "60000", "sh", "-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Held open while waiting: a closed feed means "the replica died".
        let _feed = child.stdin.take();
        child.wait().unwrap()
    };
    assert!(status("exit 0").success());
    assert_eq!(status("exit 3").code(), Some(3));
    assert_eq!(status("kill -TERM $$").signal(), Some(libc::SIGTERM));
    let missing = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args([SUPERVISE_ARG, "60000", "/no/such/program"])
        .stdin(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(CANNOT_START));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot start `/no/such/program`"));
}

#[test]
fn a_killed_supervisor_takes_its_program_along() {
    let (mut child, _feed, pids) = supervise(60_000, "echo $$; exec sleep 60");
    // Without a program there is nothing to take along, and the wait
    // below would pass on an empty list.
    assert_eq!(pids.len(), 1, "the program did not start: {pids:?}");
    assert!(running(pids[0]), "{pids:?} not running");
    // SAFETY: signalling the supervisor we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    wait_until_gone(&pids, Duration::from_secs(5));
}

/// A process that left the program's group (`setsid`), and one that made a
/// group of its own (coreutils `timeout` does), both printed after the shell.
const ESCAPING: &str = "setsid sleep 60 & a=$!; timeout 60 sleep 60 & echo $$ $a $!; wait";

#[test]
fn what_left_the_group_dies_with_a_closed_feed_a_quiet_one_or_a_stop() {
    // A hostile trial saw such processes write on beside their run's
    // retry after the replica was killed, frozen, or cancelled the run.
    let (mut child, feed, pids) = supervise(60_000, ESCAPING);
    assert_eq!(pids.len(), 3);
    assert!(pids.iter().all(|p| running(*p)));
    drop(feed);
    wait_until_gone(&pids, Duration::from_secs(5));
    child.wait().unwrap();

    let (mut child, _feed, pids) = supervise(300, ESCAPING);
    wait_until_gone(&pids, Duration::from_secs(5));
    child.wait().unwrap();

    // SIGTERM is how the replica cancels a run or ends it at its timeout.
    let (mut child, _feed, pids) = supervise(60_000, ESCAPING);
    // SAFETY: signalling the supervisor we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    wait_until_gone(&pids, Duration::from_secs(5));
    let status = child.wait().unwrap();
    assert!(!status.success());
    // Silently: the replica records why it stopped the run.
    let mut said = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut said).unwrap();
    assert_eq!(said, "");
}

#[test]
fn what_the_program_left_behind_dies_when_it_exits() {
    // The shell exits at once, its daemon still holding the output pipe:
    // the run ends with the shell's status, and nothing of it runs on.
    let (mut child, _feed, pids) = supervise(
        60_000,
        "setsid sh -c 'while :; do sleep 1; done' & echo $!; exit 4",
    );
    assert_eq!(child.wait().unwrap().code(), Some(4));
    wait_until_gone(&pids, Duration::from_secs(1));
}
