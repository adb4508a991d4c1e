//! `command: {argv, env, cwd}` — runs a program in its own process group;
//! exit code 0 is success. stdout and stderr go to the run's log line by
//! line. On cancel the whole group gets SIGKILL, so a shell's children die
//! with it.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command;

use super::{Executor, LogSink, Outcome, RunContext};
use crate::plan::CommandSpec;

pub struct CommandExecutor;

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
        let mut command = Command::new(program);
        command
            .args(args)
            .envs(&spec.env)
            .env("BATON_RUN_ID", ctx.run_id.to_string())
            .env("BATON_ATTEMPT", ctx.attempt.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so cancel can kill grandchildren too.
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
        let out = tokio::spawn(pump(child.stdout.take(), "stdout", ctx.log.clone()));
        let err = tokio::spawn(pump(child.stderr.take(), "stderr", ctx.log.clone()));
        let status = tokio::select! {
            status = child.wait() => status,
            _ = ctx.cancel.cancelled() => {
                kill_group(pgid);
                let _ = child.wait().await;
                return Outcome::failed(None, "interrupted");
            }
        };
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

/// Forwards a pipe to the log line by line; bytes that are not UTF-8 are
/// replaced rather than ending the capture.
async fn pump(pipe: Option<impl AsyncRead + Unpin>, stream: &'static str, log: LogSink) {
    let Some(pipe) = pipe else { return };
    let mut reader = BufReader::new(pipe);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let line = String::from_utf8_lossy(&buf);
                log.line(stream, line.trim_end_matches(['\n', '\r']));
            }
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
