//! Executors: what actually runs a task.
//!
//! An [`Executor`] gets the task's spec (the JSON stored with the task) and
//! a [`RunContext`], and returns an [`Outcome`]. It must stop promptly when
//! `ctx.cancel` fires (cancel, timeout, or the replica lost the run) and
//! release everything it started — the command executor kills the whole
//! process group. Three executors are built in; a library user registers
//! more with [`Registry::register`].

mod command;
pub mod error_tail;
mod http;
pub mod output;
mod sleep;
pub mod supervisor;
mod task_env;

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use self::command::CommandExecutor;
pub use self::http::HttpExecutor;
pub use self::sleep::SleepExecutor;
pub use self::task_env::TaskEnv;
use crate::store::LogLine;
use domain::time::Ts;

/// How one execution ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub success: bool,
    /// Exit code or HTTP status.
    pub result_code: Option<i64>,
    /// What went wrong, in words; `None` on success.
    pub error: Option<String>,
    /// Stopped before it ended (cancel, shutdown): nothing is known of how
    /// it would have ended. An execution that ended by itself — a command
    /// that exited, a request that was answered — is never interrupted,
    /// even when the stop came at the same moment, so a shutdown does not
    /// hand back work that already happened.
    pub interrupted: bool,
}

impl Outcome {
    pub fn done(result_code: Option<i64>) -> Self {
        Outcome {
            success: true,
            result_code,
            error: None,
            interrupted: false,
        }
    }

    pub fn failed(result_code: Option<i64>, error: impl Into<String>) -> Self {
        Outcome {
            success: false,
            result_code,
            error: Some(error.into()),
            interrupted: false,
        }
    }

    /// Stopped before it ended ([`Outcome::interrupted`]).
    pub fn interrupted() -> Self {
        Outcome {
            interrupted: true,
            ..Outcome::failed(None, "interrupted")
        }
    }
}

/// What an execution gets besides its spec.
pub struct RunContext {
    pub run_id: i64,
    pub attempt: i64,
    /// Fires when the execution must stop at once.
    pub cancel: CancellationToken,
    /// How long the run may go without a heartbeat before the sweeper
    /// fails it: a command must be dead well within this once its replica
    /// stops feeding it.
    pub heartbeat_timeout: std::time::Duration,
    pub log: LogSink,
}

/// Where an execution writes its output, line by line. Lines are batched and
/// stored by the worker, fenced like every other write to the run. Every
/// line is cleaned and cut to the bounds of [`output`], and a run's lines
/// share one byte budget, so no executor can flood memory or the store.
#[derive(Clone)]
pub struct LogSink {
    tx: mpsc::UnboundedSender<LogLine>,
    budget: output::Budget,
}

impl LogSink {
    /// A sink that keeps at most `max_bytes` of the run's output.
    pub fn new(max_bytes: usize) -> (Self, mpsc::UnboundedReceiver<LogLine>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let budget = output::Budget::new(max_bytes);
        (LogSink { tx, budget }, rx)
    }

    pub fn line(&self, stream: &'static str, line: impl AsRef<str>) {
        let line = output::clean_line(line.as_ref());
        let line = match self.budget.charge(line.len()) {
            output::Charge::Keep => line,
            output::Charge::JustRanOut => self.budget.cut_marker(),
            output::Charge::Drop => return,
        };
        // A closed receiver means the run is being abandoned; nothing to keep.
        let _ = self.tx.send(LogLine {
            at: Ts::now(),
            stream,
            line,
        });
    }
}

#[async_trait::async_trait]
pub trait Executor: Send + Sync + 'static {
    /// Runs one attempt. `spec` is the task's executor JSON, including its
    /// `kind`.
    async fn execute(&self, spec: &serde_json::Value, ctx: &RunContext) -> Outcome;
}

/// Executors by kind.
#[derive(Clone)]
pub struct Registry {
    executors: HashMap<String, Arc<dyn Executor>>,
}

impl Registry {
    /// The built-in `command`, `http` and `sleep` executors.
    pub fn builtin() -> Self {
        let mut registry = Registry {
            executors: HashMap::new(),
        };
        registry.register("command", CommandExecutor::default());
        registry.register("http", HttpExecutor::default());
        registry.register("sleep", SleepExecutor);
        registry
    }

    /// Replaces the command executor (its policy, supervisor, margin).
    pub fn with_commands(mut self, commands: CommandExecutor) -> Self {
        self.register("command", commands);
        self
    }

    pub fn register(&mut self, kind: &str, executor: impl Executor) {
        self.executors.insert(kind.to_owned(), Arc::new(executor));
    }

    pub fn get(&self, spec: &serde_json::Value) -> Result<Arc<dyn Executor>, String> {
        let kind = spec.get("kind").and_then(|k| k.as_str()).unwrap_or("");
        self.executors
            .get(kind)
            .cloned()
            .ok_or_else(|| format!("no executor for kind `{kind}` on this replica"))
    }
}

/// Reads an executor's own spec out of the stored JSON.
fn spec_of<T: serde::de::DeserializeOwned>(spec: &serde_json::Value) -> Result<T, Outcome> {
    serde_json::from_value(spec.clone())
        .map_err(|e| Outcome::failed(None, format!("bad executor spec: {e}")))
}
