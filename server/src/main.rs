use clap::Parser;

use baton::config::{Cli, Command};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    baton::telemetry::init();
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => baton::serve::serve(cli.settings).await,
        Command::Migrate => {
            let store = baton::store::connect(&cli.settings.database_url.0).await?;
            store.migrate().await?;
            tracing::info!(database = %cli.settings.database_url, "migrations applied");
            Ok(())
        }
        Command::Submit(args) => baton::client::submit(args, cli.settings.listen).await,
        Command::Status(args) => baton::client::status(args, cli.settings.listen).await,
        Command::Bench(args) => baton::bench::run(cli.settings, args).await,
        Command::HashPassword => baton::auth::hash_password_command(),
        Command::NewToken => baton::auth::new_token_command(),
    }
}
