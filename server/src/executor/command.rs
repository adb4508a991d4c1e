//! `command: {argv, env, cwd}` — runs a program under a supervisor
//! ([`supervisor`]); exit code 0 is success. stdout and stderr go to the
//! run's log line by line. When the program ends, or on cancel, everything
//! it started dies with it, whatever process group it moved to.

use std::process::Stdio;

use std::path::PathBuf;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::{ChildStdin, Command};

use super::error_tail::Tail;
use super::output::pump;
use super::{Executor, Outcome, RunContext, TaskEnv, supervisor};
use crate::plan::CommandPolicy;
use crate::plan::CommandSpec;

/// How long a cancelled command's supervisor may take to end it.
const STOP_WAIT: Duration = Duration::from_secs(5);
/// How long the output may stay open after the command ended.
const OUTPUT_DRAIN: Duration = Duration::from_secs(5);

pub struct CommandExecutor {
    /// Checked again here: this replica may be stricter than the one that
    /// accepted the plan, and old plans predate the policy.
    pub policy: CommandPolicy,
    /// The binary that supervises each command: this one, normally (its
    /// `main` calls [`supervisor::run_if_asked`] first).
    pub supervisor: PathBuf,
    /// How long a supervisor waits for the replica's feed before it kills
    /// the command: half of `stale_after`.
    pub quiet: Duration,
    /// Which of this server's variables a command inherits: none of
    /// Baton's own settings.
    pub env: TaskEnv,
}

impl Default for CommandExecutor {
    fn default() -> Self {
        CommandExecutor {
            policy: CommandPolicy::Any,
            // This very image, whatever has happened to its file since:
            // the path `current_exe` read at start-up failed every command
            // ("cannot start `echo`") once the binary was moved, and an
            // upgrade in place would have put the new version under the
            // old replica.
            supervisor: PathBuf::from("/proc/self/exe"),
            quiet: domain::liveness::DEFAULT_STALE_AFTER / 2,
            env: TaskEnv::default(),
        }
    }
}

impl CommandExecutor {
    /// Supervised by `binary` (tests, whose own binary is a test runner).
    pub fn supervised_by(mut self, binary: impl Into<PathBuf>) -> Self {
        self.supervisor = binary.into();
        self
    }
}

#[async_trait::async_trait]
impl Executor for CommandExecutor {
    async fn execute(&self, spec: &serde_json::Value, ctx: &RunContext) -> Outcome {
        let spec: CommandSpec = match super::spec_of(spec) {
            Ok(s) => s,
            Err(outcome) => return outcome,
        };
        let Some((program, args)) = spec.argv.split_first() else {
            return Outcome::failed(None, "argv is empty");
        };
        if let Err(why) = self.policy.allows(program, spec.env.keys()) {
            return Outcome::failed(None, why);
        }
        // Quiet for less than the run's own heartbeat timeout too: a task
        // may ask for 2 s where the replica allows 10 (a hostile trial had
        // the run swept and retried while its command ran on, frozen but
        // not yet quiet for long enough).
        let quiet = self.quiet.min(ctx.heartbeat_timeout / 2);
        let mut command = Command::new(&self.supervisor);
        command
            .arg(supervisor::SUPERVISE_ARG)
            .arg(quiet.as_millis().to_string())
            .arg(program)
            .args(args)
            // The supervisor passes its environment on to the program.
            .env_clear()
            .envs(self.env.inherited(std::env::vars_os()))
            .envs(&spec.env)
            // The fencing token: run ids only grow, and each attempt is a
            // new run, so a target that remembers the highest token it
            // accepted can refuse a stale attempt that is somehow still
            // talking to it.
            .env("BATON_RUN_ID", ctx.run_id.to_string())
            .env("BATON_ATTEMPT", ctx.attempt.to_string())
            .env("BATON_FENCING_TOKEN", ctx.run_id.to_string())
            // The feed: a byte every `feed_every` while this replica runs.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // The supervisor leads a new group the command joins, so one
            // signal ends both, and the command's children too.
            .process_group(0)
            .kill_on_drop(true);
        if let Some(cwd) = &spec.cwd {
            // Checked here, or the spawn's "No such file or directory"
            // would read as if the program were missing.
            if !std::path::Path::new(cwd).is_dir() {
                return Outcome::failed(
                    None,
                    format!("the working directory `{cwd}` does not exist on this replica"),
                );
            }
            command.current_dir(cwd);
        }
        let mut child = match command.spawn() {
            Ok(c) => c,
            Err(e) => return Outcome::failed(None, format!("cannot start `{program}`: {e}")),
        };
        let feeder = tokio::spawn(feed(child.stdin.take(), supervisor::feed_every(quiet)));
        let tail = Tail::default();
        let out = tokio::spawn(pump(child.stdout.take(), "stdout", ctx.log.clone(), None));
        let err = tokio::spawn(pump(
            child.stderr.take(),
            "stderr",
            ctx.log.clone(),
            Some(tail.clone()),
        ));
        let status = tokio::select! {
            biased;
            status = child.wait() => status,
            _ = ctx.cancel.cancelled() => {
                let status = stop(&mut child).await;
                // The program may have exited just before the stop reached
                // it: then it ended by itself, and how is recorded, not
                // handed back to run again (a rolling restart re-ran
                // commands that had exited 0).
                if !status.as_ref().is_ok_and(ended_by_itself) {
                    feeder.abort();
                    return Outcome::interrupted();
                }
                status
            }
        };
        feeder.abort();
        // The supervisor killed what the program left behind before it
        // exited, so the pipes are closing. Should anything still hold one
        // (a descriptor passed outside the tree), the run does not wait
        // on it: a daemon with the command's stdout kept a run RUNNING
        // until its deadline and its worker slot taken.
        for pump in [out, err] {
            if tokio::time::timeout(OUTPUT_DRAIN, pump).await.is_err() {
                ctx.log.line(
                    "stderr",
                    format!(
                        "[baton] the output was still open {} s after the command ended; \
                     not waiting for more",
                        OUTPUT_DRAIN.as_secs()
                    ),
                );
            }
        }
        match status {
            Ok(s) if s.success() => Outcome::done(Some(0)),
            Ok(s) => match s.code() {
                Some(code) => Outcome::failed(
                    Some(code.into()),
                    tail.quoted_after(format!("exited with code {code}")),
                ),
                None => Outcome::failed(None, tail.quoted_after(format!("killed by signal ({s})"))),
            },
            Err(e) => Outcome::failed(None, format!("lost track of the process: {e}")),
        }
    }
}

/// Keeps the supervisor from killing the command while this replica runs.
async fn feed(pipe: Option<ChildStdin>, every: Duration) {
    let Some(mut pipe) = pipe else { return };
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        if pipe.write_all(b".").await.is_err() {
            return; // the supervisor ended
        }
    }
}

/// Ends the command: the supervisor kills everything below it (SIGTERM
/// asks it to). One that does not exit in time is killed itself, the
/// program with it (it dies with its parent). Returns how the supervisor
/// exited.
async fn stop(child: &mut tokio::process::Child) -> std::io::Result<std::process::ExitStatus> {
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: only signals; the supervisor is our child and not yet
        // reaped, so its pid cannot belong to anyone else.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    match tokio::time::timeout(STOP_WAIT, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            let _ = child.start_kill();
            child.wait().await
        }
    }
}

/// Whether a supervisor's exit is its program's own (the program exited),
/// not its ending of the program ([`supervisor::STOPPED`]) or its own death
/// by a signal.
fn ended_by_itself(status: &std::process::ExitStatus) -> bool {
    status
        .code()
        .is_some_and(|code| code != supervisor::STOPPED)
}
