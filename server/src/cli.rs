//! The `baton` command line: its subcommands and their arguments. The
//! settings they share are [`Settings`].

use clap::{Args, Parser, Subcommand};

use crate::bench::BenchArgs;
use crate::client::{
    AuditArgs, ListArgs, LogsArgs, PlanArg, RunsArgs, ScheduleArgs, StatusArgs, SubmitArgs,
    TargetArgs, TaskActionArgs,
};
use crate::config::{DatabaseArg, Settings};

/// `baton` alone serves, with the replica's settings before any
/// subcommand; each subcommand takes only its own options, so its
/// `--help` lists what applies to it. A replica setting given before a
/// subcommand is refused rather than ignored (`baton --workers 4 serve`:
/// put it after `serve`).
#[derive(Parser, Debug)]
#[command(
    name = "baton",
    version = crate::serve::VERSION_LONG,
    about = "A highly available task scheduler with an operator dashboard",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The settings of `baton` alone, which serves; read by the client
    /// commands for their default server (`BATON_LISTEN`) too.
    #[command(flatten)]
    pub settings: Settings,
}

/// `baton bench`: a replica's settings for the replicas it starts, and
/// the bench's own.
#[derive(Args, Debug)]
pub struct BenchCommand {
    #[command(flatten)]
    pub settings: Settings,
    #[command(flatten)]
    pub bench: BenchArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the scheduler loops and serve the API and dashboard (default).
    Serve(Box<Settings>),
    /// Apply database migrations and exit.
    Migrate(DatabaseArg),
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
    /// One plan as a file: `baton plan export ID [--yaml]` prints the plan
    /// file that submits it again.
    Plan(crate::client::PlanArgs),
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
    Paused(ListArgs),
    /// List the replicas and agents: labels, state, last heartbeat, runs,
    /// version.
    Workers(crate::client::WorkersArgs),
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
    Bench(Box<BenchCommand>),
    /// Read a password from standard input and print its hash for the
    /// users file's `password_hash`.
    HashPassword,
    /// Print a new API token and its hash for the users file's
    /// `token_hashes`; with --agent, an agent's entry for its `agents:`.
    NewToken(crate::auth::NewTokenArgs),
    /// Run tasks on this machine for the replicas at --server, over the
    /// worker protocol, without database access (docs/agents.md).
    Agent(Box<crate::agent::AgentArgs>),
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

    /// A client command's `--help` lists its own options, not the ~30 of
    /// a replica; a replica setting before a subcommand is refused, not
    /// silently dropped; after `serve` it is read.
    #[test]
    fn each_command_takes_only_its_own_options() {
        use clap::CommandFactory;
        let mut cli = Cli::command();
        // As `--help` sees them: global options propagated to every
        // subcommand (replica settings once were).
        cli.build();
        let longs = |name: &str| -> Vec<String> {
            let sub = cli.find_subcommand(name).expect(name);
            sub.get_arguments()
                .filter_map(|a| a.get_long().map(str::to_owned))
                .collect()
        };
        for name in ["serve", "bench"] {
            assert!(longs(name).contains(&"workers".to_owned()), "{name}");
        }
        for name in ["migrate", "prune"] {
            let own = longs(name);
            assert!(own.contains(&"database-url".to_owned()), "{name}: {own:?}");
            assert!(!own.contains(&"workers".to_owned()), "{name}: {own:?}");
        }
        // An agent runs tasks (its own --workers) and never touches the
        // database or serves.
        let agent = longs("agent");
        assert!(agent.contains(&"workers".to_owned()), "{agent:?}");
        for replica_setting in ["database-url", "listen", "users-file"] {
            assert!(!agent.contains(&replica_setting.to_owned()), "{agent:?}");
        }
        let mut clients = 0;
        for sub in cli.get_subcommands() {
            let name = sub.get_name();
            if ["serve", "bench", "migrate", "prune", "agent"].contains(&name) {
                continue;
            }
            let own = longs(name);
            for replica_setting in ["workers", "database-url", "listen", "users-file"] {
                assert!(
                    !own.contains(&replica_setting.to_owned()),
                    "{name} lists --{replica_setting}: {own:?}"
                );
            }
            clients += 1;
        }
        assert!(clients >= 15, "{clients}");
        let misplaced = Cli::try_parse_from(["baton", "--workers", "4", "serve"]).unwrap_err();
        assert!(misplaced.to_string().contains("--workers"), "{misplaced}");
        let parsed = Cli::try_parse_from(["baton", "serve", "--workers", "4"]).unwrap();
        let Some(super::Command::Serve(settings)) = parsed.command else {
            panic!("serve: {:?}", parsed.command)
        };
        assert_eq!(settings.workers, 4);
    }

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
