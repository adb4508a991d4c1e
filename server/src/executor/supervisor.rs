//! A dead-man switch between a replica and each command it runs.
//!
//! A command must not outlive its replica: when a replica is killed its
//! runs are failed by the sweeper and retried elsewhere, and an orphan still
//! running beside the retry breaks "no run executes twice at once" for the
//! very thing it protects (a hostile trial saw 8 of 300 tasks run twice
//! after a `kill -9`, and a frozen replica's command run 3.6 s beside its
//! retry). So the replica does not start the program itself. It starts its
//! own binary as a small supervisor, in a new process group, and feeds it a
//! byte over a pipe every [`feed_every`]; the supervisor starts the program
//! in that group and kills the whole group when
//!
//! - the pipe reaches end-of-file: the replica died (the kernel closes a
//!   dead process's pipes, whatever killed it), or
//! - no byte came for `quiet`: the replica is frozen (SIGSTOP, a stalled
//!   VM) or too starved to heartbeat; `quiet` is half of `stale_after`, so
//!   the command is dead before the sweeper can fail its run.
//!
//! `PR_SET_PDEATHSIG` alone would not do: it signals only the direct child
//! (not a shell's children), fires when the spawning *thread* exits (tokio
//! threads come and go), and never fires for a frozen parent. The
//! supervisor does set it on the program, for the case of the supervisor
//! itself being killed.
//!
//! A process group is not enough either: anything that calls `setsid` or
//! `setpgid` leaves it (coreutils `timeout` does, and every daemon), and a
//! hostile trial saw such a process write on beside its run's retry after
//! a `kill -9`, a SIGSTOP, a cancel and a timeout. So the supervisor is a
//! child subreaper (`PR_SET_CHILD_SUBREAPER`): whatever the program leaves
//! behind is re-parented to the supervisor, not to init, and ending the
//! command means killing every process below the supervisor
//! ([`kill_tree`]), whichever group it is in. That is done when the
//! program exits (what it started in the background goes with it, as the
//! group always did), when the replica asks (SIGTERM: cancel, timeout,
//! shutdown), and in the two cases above.
//!
//! The supervisor is entered through [`run_if_asked`] at the very start of
//! `main`, before any runtime or thread exists; it only polls, reads, waits
//! and signals.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// `argv[1]` that turns the binary into a supervisor.
pub const SUPERVISE_ARG: &str = "__baton-supervise";
/// The exit code when the program could not be started (as shells do).
pub const CANNOT_START: i32 = 127;
/// The exit code of a supervisor that ended its program before it exited
/// (asked to, or its replica gone or quiet); otherwise it exits as its
/// program did.
pub const STOPPED: i32 = 137;

/// How often the replica feeds a supervisor that may go `quiet` for so long.
pub fn feed_every(quiet: Duration) -> Duration {
    (quiet / 5).max(Duration::from_millis(20))
}

/// Runs as a supervisor when this process was started as one, and returns
/// its exit code; `None` for any other start.
pub fn run_if_asked() -> Option<i32> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != SUPERVISE_ARG {
        return None;
    }
    let quiet = args
        .next()
        .and_then(|ms| ms.to_str()?.parse::<u64>().ok())
        .map(Duration::from_millis);
    let (Some(quiet), Some(program)) = (quiet, args.next()) else {
        let _ = writeln!(
            std::io::stderr(),
            "usage: baton {SUPERVISE_ARG} QUIET_MS PROGRAM [ARGS...]"
        );
        return Some(2);
    };
    Some(supervise(quiet, program, args.collect()))
}

/// Set by SIGTERM: the replica wants the command ended (cancel, timeout).
static ASKED_TO_STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigterm(_: libc::c_int) {
    ASKED_TO_STOP.store(true, Ordering::SeqCst);
}

fn supervise(quiet: Duration, program: OsString, args: Vec<OsString>) -> i32 {
    // Lead a process group of our own (the replica starts us as one; this
    // makes sure), so that a signal to "our group" can never reach whoever
    // started us.
    // SAFETY: setpgid on ourselves; failing (already a session leader)
    // leaves us in a group we lead anyway. prctl with constant arguments.
    // The handler only stores to an atomic; without SA_RESTART the signal
    // interrupts the poll below at once.
    unsafe {
        libc::setpgid(0, 0);
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigterm as *const () as usize;
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
    }
    // The program leads a group of its own, so that the supervisor can
    // signal it without signalling itself; the program's stdin is not the
    // feed.
    let mut command = Command::new(&program);
    command.args(&args).stdin(Stdio::null()).process_group(0);
    // Should this supervisor itself be killed (the OOM killer, an
    // operator), its program goes too. It applies here, unlike in the
    // replica: this process has a single thread, and the program is its
    // direct child. A supervisor that died before the flag was set is
    // caught by comparing the parent.
    let supervisor = std::process::id() as libc::pid_t;
    // SAFETY: prctl and getppid are async-signal-safe; nothing allocates.
    unsafe {
        command.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != supervisor {
                libc::_exit(137);
            }
            Ok(())
        });
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "cannot start `{}`: {e}",
                program.to_string_lossy()
            );
            return CANNOT_START;
        }
    };
    // Wakes the loop the moment the program ends (Linux 5.3+); without it
    // the loop looks every 20 ms.
    // SAFETY: a plain syscall on our own child's pid.
    let exited = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id(), 0) } as i32;
    let mut last_feed = Instant::now();
    let mut buf = [0u8; 256];
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            // What the program left running in the background goes with it.
            kill_tree();
            return exit_like(status);
        }
        reap_orphans(child.id() as libc::pid_t);
        if ASKED_TO_STOP.load(Ordering::SeqCst) {
            // Said nothing: the replica asked, and records why itself
            // (cancel, timeout, a hand-back); a line here would land in
            // the log of a run that goes on elsewhere.
            kill_tree();
            // SAFETY: ends this process; nothing is left to clean up.
            unsafe { libc::_exit(STOPPED) }
        }
        let mut fds = [
            libc::pollfd {
                fd: libc::STDIN_FILENO,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: exited,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let watched = if exited >= 0 { 2 } else { 1 };
        let left = quiet.saturating_sub(last_feed.elapsed());
        let wait_ms = if exited >= 0 {
            left.as_millis().clamp(1, 1000) as i32
        } else {
            20
        };
        // SAFETY: valid pollfds for the duration of the call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), watched, wait_ms) };
        let feed = fds[0].revents;
        if ready > 0 && feed & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
            // SAFETY: reading into a buffer we own, within its length.
            let read =
                unsafe { libc::read(libc::STDIN_FILENO, buf.as_mut_ptr().cast(), buf.len()) };
            match read {
                0 => end_command("the replica is gone (its feed closed)"),
                n if n > 0 => last_feed = Instant::now(),
                _ => {} // EINTR, EAGAIN: look again
            }
        }
        if last_feed.elapsed() > quiet {
            end_command(&format!(
                "the replica went quiet for {} ms (frozen or starved)",
                quiet.as_millis()
            ));
        }
    }
}

/// Ends the program, everything it started and this supervisor.
fn end_command(why: &str) -> ! {
    // The replica may be dead: the write must not panic or block long
    // (a frozen replica's pipe has room for a line).
    let _ = writeln!(
        std::io::stderr(),
        "[baton] {why}: killing the command so it cannot run beside its retry"
    );
    kill_tree();
    // SAFETY: ends this process; nothing is left to clean up.
    unsafe { libc::_exit(STOPPED) }
}

/// Kills every process below this supervisor and reaps them. Killing a
/// parent hands its children to this subreaper, so a few passes reach the
/// whole tree, however it was split into groups and sessions; a pass that
/// finds no live process ends it.
pub(crate) fn kill_tree() {
    let me = std::process::id() as libc::pid_t;
    for _ in 0..200 {
        let below = descendants(me);
        if below.is_empty() {
            break;
        }
        for pid in below {
            // SAFETY: only signals; a pid that exited meanwhile is still a
            // zombie below us (so not reused) or gone (ESRCH).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        reap();
        std::thread::sleep(Duration::from_millis(2));
    }
    reap();
}

/// Collects what the program left behind and has since ended (re-parented
/// to this subreaper), so a long command's orphans do not pile up as
/// zombies; the program's own status is left for `try_wait`.
fn reap_orphans(program: libc::pid_t) {
    loop {
        // SAFETY: waitid only looks (WNOWAIT) at a child of ours that has
        // ended; siginfo_t is plain data.
        let pid = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
            if libc::waitid(libc::P_ALL, 0, &mut info, flags) != 0 {
                return;
            }
            info.si_pid()
        };
        if pid == 0 || pid == program {
            return;
        }
        // SAFETY: reaps that one child, which has ended.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
    }
}

/// Collects the exit status of every child that has ended.
fn reap() {
    // SAFETY: waitpid with WNOHANG on any child of ours.
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
}

/// The live (not zombie) processes whose chain of parents reaches `root`.
fn descendants(root: libc::pid_t) -> Vec<libc::pid_t> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut parent_of = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("");
        let Some(ppid) = fields.next().and_then(|p| p.parse::<libc::pid_t>().ok()) else {
            continue;
        };
        parent_of.push((pid, ppid, state == "Z"));
    }
    let mut tree = vec![root];
    let mut found = Vec::new();
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        for &(pid, ppid, zombie) in &parent_of {
            if ppid == parent && pid != root && !tree.contains(&pid) {
                tree.push(pid);
                if !zombie {
                    found.push(pid);
                }
            }
        }
        i += 1;
    }
    found
}

/// Exits the way the program did, so the replica reads the same status.
fn exit_like(status: ExitStatus) -> i32 {
    if let Some(code) = status.code() {
        return code;
    }
    if let Some(signal) = status.signal() {
        // SAFETY: restoring the default action and raising the signal on
        // ourselves; if it does not end us, the code below does.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
        return 128 + signal;
    }
    1
}
