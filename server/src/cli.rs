//! The `baton` command line: its subcommands and their arguments. The
//! settings they share are [`Settings`].

use clap::{Parser, Subcommand};

use crate::bench::BenchArgs;
use crate::client::{
    AuditArgs, LogsArgs, PausedArgs, PlanArg, RunsArgs, ScheduleArgs, StatusArgs, SubmitArgs,
    TargetArgs, TaskActionArgs,
};
use crate::config::Settings;

#[derive(Parser, Debug)]
#[command(
    name = "baton",
    version = crate::serve::VERSION_LONG,
    about = "A highly available task scheduler with an operator dashboard"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub settings: Settings,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the scheduler loops and serve the API and dashboard (default).
    Serve,
    /// Apply database migrations and exit.
    Migrate,
    /// Submit a plan file to a running server and print the plan.
    Submit(SubmitArgs),
    /// Show the newest plans, or one plan's tasks, from a running server;
    /// with --act, retry, cancel or skip all on the plans a filter matches.
    #[command(visible_alias = "plans")]
    Status(StatusArgs),
    /// Search runs across plans, newest first: by status, target, plan,
    /// replica, actor, error text, finish time.
    Runs(RunsArgs),
    /// Show the audit log, newest first: who did what, when and from
    /// where, by actor, action, subject and time.
    Audit(AuditArgs),
    /// Print a run's log; with --follow, until the run ends.
    Logs(LogsArgs),
    /// Retry a FAILED or CANCELED task (by name or id), or every such task
    /// of a plan.
    Retry(TaskActionArgs),
    /// Cancel a task's live run, or every live run of a plan.
    Cancel(TaskActionArgs),
    /// Skip a NOT_STARTED, FAILED or CANCELED task: it counts as complete.
    Skip(TaskActionArgs),
    /// Approve a task waiting for approval, or every such task of a plan.
    Approve(TaskActionArgs),
    /// Pause a plan: none of its runs is promoted until it is resumed.
    Pause(PlanArg),
    /// Resume a paused plan.
    Resume(PlanArg),
    /// List every paused plan and target.
    Paused(PausedArgs),
    /// List targets, pause or resume one across every plan, set its
    /// capacity.
    Target(TargetArgs),
    /// Recurring plans: create, list, show, update, pause, resume,
    /// trigger, delete.
    Schedule(ScheduleArgs),
    /// Delete finished plans older than a cutoff, once, now (the leader
    /// does it every minute with `--retain-finished`).
    Prune(crate::prune_command::PruneArgs),
    /// Measure end-to-end throughput and latency with no-op runs.
    Bench(BenchArgs),
    /// Read a password from standard input and print its hash for the
    /// users file's `password_hash`.
    HashPassword,
    /// Print a new API token and its hash for the users file's
    /// `token_hashes`.
    NewToken,
    /// Print the shell completion script for bash, zsh, fish, elvish or
    /// powershell, e.g. `baton completions bash > /etc/bash_completion.d/baton`.
    Completions { shell: clap_complete::Shell },
}

/// `baton completions SHELL`: the script, on standard output.
pub fn print_completions(shell: clap_complete::Shell) {
    use clap::CommandFactory;
    clap_complete::generate(shell, &mut Cli::command(), "baton", &mut std::io::stdout());
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Cli;
    use crate::loops::SchedulerConfig;

    /// The flags' defaults are the scheduler's constants, not a second copy.
    #[test]
    fn flag_defaults_are_the_schedulers() {
        let parsed = Cli::try_parse_from(["baton"]).unwrap().settings.scheduler();
        let defaults = SchedulerConfig::default();
        assert_eq!(parsed.workers, defaults.workers);
        assert_eq!(parsed.poll_interval, defaults.poll_interval);
        assert_eq!(parsed.heartbeat_interval, defaults.heartbeat_interval);
        assert_eq!(parsed.stale_after, defaults.stale_after);
        assert_eq!(parsed.shutdown_grace, defaults.shutdown_grace);
        assert_eq!(parsed.sweep_interval, defaults.sweep_interval);
        assert_eq!(parsed.leader_lease, defaults.leader_lease);
        assert_eq!(parsed.delivery.max_attempts, defaults.delivery.max_attempts);
        assert_eq!(parsed.retain_finished, defaults.retain_finished);
    }
}
