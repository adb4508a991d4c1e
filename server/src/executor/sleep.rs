//! `sleep: 2s` — waits, then succeeds. For demos and benchmarks; `0s`
//! returns at once.

use std::time::Duration;

use super::{Executor, Outcome, RunContext};

pub struct SleepExecutor;

#[derive(serde::Deserialize)]
struct SleepSpec {
    /// Milliseconds, as stored by `ExecutorSpec::Sleep`.
    duration: u64,
}

#[async_trait::async_trait]
impl Executor for SleepExecutor {
    async fn execute(&self, spec: &serde_json::Value, ctx: &RunContext) -> Outcome {
        let spec: SleepSpec = match super::spec_of(spec) {
            Ok(s) => s,
            Err(outcome) => return outcome,
        };
        if spec.duration == 0 {
            return Outcome::done(None);
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(spec.duration)) => Outcome::done(None),
            _ = ctx.cancel.cancelled() => Outcome::interrupted(),
        }
    }
}
