use clap::Parser;

use baton::cli::{Cli, Command};
use baton::client::{TaskAction, task_action};
use baton::dashboard::assets::Site;

/// The dashboard's browser bundle, compiled in by `build.rs` (only into the
/// binary: the tests that link the library need no copy of the wasm).
static SITE: Site = include!(concat!(env!("OUT_DIR"), "/site.rs"));

fn main() -> std::process::ExitCode {
    // First, before any thread exists: this process may be a command's
    // supervisor rather than a server (see `executor::supervisor`).
    if let Some(code) = baton::executor::supervisor::run_if_asked() {
        std::process::exit(code);
    }
    let ran = tokio::runtime::Runtime::new()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| runtime.block_on(run()));
    match ran {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // A refused sign-in, a bad file or a server that is down is a
            // message with its causes, not a crash: no backtrace, whatever
            // RUST_BACKTRACE says (returning the error from `main` printed
            // one).
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The commands whose output people pipe into `head`, `grep -m1` or
/// `less`: all but the long-running and database-writing ones.
fn prints_for_a_pipe(command: &Command) -> bool {
    !matches!(
        command,
        Command::Serve(_)
            | Command::Migrate(_)
            | Command::Prune(_)
            | Command::Bench(_)
            | Command::Agent(_)
    )
}

/// Rust ignores SIGPIPE, so a write to a pipe whose reader left fails, and
/// `println!` panics on it (`baton completions bash | head` printed a
/// panic and a backtrace). A command that only prints should end as `ls |
/// head` does: silently, by the signal. Sockets are not affected: they
/// are written with `MSG_NOSIGNAL`.
fn die_quietly_on_a_closed_pipe() {
    // SAFETY: sets the process-wide disposition of one signal to the
    // kernel's default; no handler, so no Rust code runs in one.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

async fn run() -> anyhow::Result<()> {
    baton::telemetry::init();
    let mut cli = Cli::parse();
    cli.settings.bundle = &SITE;
    let Some(command) = cli.command else {
        return baton::serve::serve(cli.settings).await;
    };
    if prints_for_a_pipe(&command) {
        die_quietly_on_a_closed_pipe();
    }
    match command {
        Command::Serve(mut settings) => {
            settings.bundle = &SITE;
            baton::serve::serve(*settings).await
        }
        Command::Migrate(database) => {
            let store = baton::store::connect(&database.url.0).await?;
            store.migrate().await?;
            tracing::info!(database = %database.url, "migrations applied");
            Ok(())
        }
        Command::Submit(args) => baton::client::submit(args, cli.settings.listen).await,
        Command::Status(args) => baton::client::status(args, cli.settings.listen).await,
        Command::Runs(args) => baton::client::runs(args, cli.settings.listen).await,
        Command::Audit(args) => baton::client::audit(args, cli.settings.listen).await,
        Command::Logs(args) => baton::client::logs(args, cli.settings.listen).await,
        Command::Plan(args) => baton::client::plan(args, cli.settings.listen).await,
        Command::Retry(args) => task_action(TaskAction::Retry, args, cli.settings.listen).await,
        Command::Cancel(args) => task_action(TaskAction::Cancel, args, cli.settings.listen).await,
        Command::Skip(args) => task_action(TaskAction::Skip, args, cli.settings.listen).await,
        Command::Approve(args) => task_action(TaskAction::Approve, args, cli.settings.listen).await,
        Command::Pause(args) => baton::client::pause(args, cli.settings.listen, false).await,
        Command::Resume(args) => baton::client::pause(args, cli.settings.listen, true).await,
        Command::Paused(args) => {
            baton::client::paused(args.server, args.json, cli.settings.listen).await
        }
        Command::Workers(args) => baton::client::workers(args, cli.settings.listen).await,
        Command::Target(args) => baton::client::target(args, cli.settings.listen).await,
        Command::Schedule(args) => baton::client::schedule(args, cli.settings.listen).await,
        Command::Prune(args) => baton::prune_command::prune_command(args).await,
        Command::Bench(bench) => {
            let mut bench = *bench;
            bench.settings.bundle = &SITE;
            baton::bench::run(bench.settings, bench.bench).await
        }
        Command::HashPassword => baton::auth::hash_password_command(),
        Command::NewToken(args) => baton::auth::new_token_command(&args),
        Command::Agent(args) => baton::agent::run(*args).await,
        Command::Completions { shell } => {
            baton::cli::print_completions(shell);
            Ok(())
        }
    }
}
