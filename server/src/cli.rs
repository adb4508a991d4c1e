//! The `baton` command line: its subcommands and their arguments. The
//! settings they share are [`Settings`].

use clap::{Parser, Subcommand};

use crate::bench::BenchArgs;
use crate::client::{StatusArgs, SubmitArgs};
use crate::config::Settings;

#[derive(Parser, Debug)]
#[command(
    name = "baton",
    version,
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
    /// Show the newest plans, or one plan's tasks, from a running server.
    Status(StatusArgs),
    /// Measure end-to-end throughput and latency with no-op runs.
    Bench(BenchArgs),
    /// Read a password from standard input and print its hash for the
    /// users file's `password_hash`.
    HashPassword,
    /// Print a new API token and its hash for the users file's
    /// `token_hashes`.
    NewToken,
}
