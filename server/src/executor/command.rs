//! `command: {argv, env, cwd}` — runs a program in its own process group;
//! exit code 0 is success. stdout and stderr go to the run's log line by
//! line. On cancel the whole group gets SIGKILL, so a shell's children die
//! with it.

use std::process::Stdio;

use std::path::PathBuf;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::{ChildStdin, Command};

use super::output::pump;
use super::{CommandPolicy, Executor, Outcome, RunContext, supervisor};
use crate::plan::CommandSpec;

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
}

impl Default for CommandExecutor {
    fn default() -> Self {
        CommandExecutor {
            policy: CommandPolicy::Any,
            supervisor: std::env::current_exe().unwrap_or_else(|_| "baton".into()),
            quiet: crate::scheduler::DEFAULT_STALE_AFTER / 2,
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
        if let Err(why) = self.policy.allows(program) {
            return Outcome::failed(None, why);
        }
        let mut command = Command::new(&self.supervisor);
        command
            .arg(supervisor::SUPERVISE_ARG)
            .arg(self.quiet.as_millis().to_string())
            .arg(program)
            .args(args)
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
            command.current_dir(cwd);
        }
        let mut child = match command.spawn() {
            Ok(c) => c,
            Err(e) => return Outcome::failed(None, format!("cannot start `{program}`: {e}")),
        };
        let pgid = child.id();
        let feeder = tokio::spawn(feed(child.stdin.take(), supervisor::feed_every(self.quiet)));
        let out = tokio::spawn(pump(child.stdout.take(), "stdout", ctx.log.clone()));
        let err = tokio::spawn(pump(child.stderr.take(), "stderr", ctx.log.clone()));
        let status = tokio::select! {
            status = child.wait() => status,
            _ = ctx.cancel.cancelled() => {
                kill_group(pgid);
                feeder.abort();
                let _ = child.wait().await;
                return Outcome::failed(None, "interrupted");
            }
        };
        feeder.abort();
        // Children that kept the pipes open would hold the readers forever:
        // the group goes when its leader exits.
        kill_group(pgid);
        let _ = out.await;
        let _ = err.await;
        match status {
            Ok(s) if s.success() => Outcome::done(Some(0)),
            Ok(s) => match s.code() {
                Some(code) => {
                    Outcome::failed(Some(code.into()), format!("exited with code {code}"))
                }
                None => Outcome::failed(None, format!("killed by signal ({s})")),
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

fn kill_group(pgid: Option<u32>) {
    if let Some(pgid) = pgid.and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: killpg only sends a signal; a stale group id at worst
        // fails with ESRCH, which is ignored.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
    }
}
