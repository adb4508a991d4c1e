//! `baton logs RUN [--follow]`: a run's output, and with `--follow` the
//! lines as they come until the run ends, exiting with its outcome (0 when
//! DONE), as `kubectl logs -f` and `gh run watch` do.

use std::time::Duration;

use clap::Args;
use domain::model::{RunStatus, RunView};

use super::ServerArg;

/// How often `--follow` looks for new lines.
const FOLLOW_POLL: Duration = Duration::from_millis(500);

#[derive(Args, Debug, Clone)]
pub struct LogsArgs {
    /// The run id (the plan page and `baton runs` show it).
    pub run: i64,
    /// Keep printing new lines until the run ends; exit 0 when it is DONE,
    /// 1 when it FAILED or was CANCELED.
    #[arg(long, short = 'f')]
    pub follow: bool,
    #[command(flatten)]
    pub server: ServerArg,
}

pub async fn logs(args: LogsArgs, listen: std::net::SocketAddr) -> anyhow::Result<()> {
    let client = args.server.client(listen)?;
    let path = format!("runs/{}/log", args.run);
    let mut shown = 0;
    loop {
        // The run first, then its log: a run seen ended has all its lines.
        let run: RunView = client.get(&format!("runs/{}", args.run)).await?;
        let log = client.get_text(&path).await?;
        // The log only grows; a shorter one (pruned meanwhile) starts over.
        let new = log.get(shown..).unwrap_or(&log);
        super::show(new);
        shown = log.len();
        if !args.follow {
            return Ok(());
        }
        if run.status.is_terminal() {
            return match run.status {
                RunStatus::Done => Ok(()),
                status => anyhow::bail!(
                    "run {} ended {status}{}",
                    run.id,
                    run.error.map(|e| format!(": {e}")).unwrap_or_default()
                ),
            };
        }
        tokio::time::sleep(FOLLOW_POLL).await;
    }
}
