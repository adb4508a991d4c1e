//! `baton status [PLAN]`: the newest plans with their tasks counted by
//! status, or one plan with every task, its status and why it waits.

use clap::Args;

use super::{ServerArg, render};

#[derive(Args, Debug, Clone)]
pub struct StatusArgs {
    /// A plan id: show that plan's tasks. Without it, list plans.
    pub plan: Option<i64>,
    /// List only plans in this status (NOT_STARTED, RUNNING, FAILED, DONE,
    /// CANCELED).
    #[arg(long, conflicts_with = "plan")]
    pub status: Option<String>,
    /// Plans to list, newest first.
    #[arg(long, default_value_t = 20, conflicts_with = "plan")]
    pub limit: i64,
    /// Print what the API returns (JSON) instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub server: ServerArg,
}

pub async fn status(args: StatusArgs, listen: std::net::SocketAddr) -> anyhow::Result<()> {
    let client = args.server.client(listen)?;
    match args.plan {
        Some(id) => {
            let view = client.plan(id).await?;
            match args.json {
                true => println!("{}", serde_json::to_string_pretty(&view)?),
                false => print!("{}", render::plan(&view, client.base())),
            }
        }
        None => {
            let list = client.plans(args.status.as_deref(), args.limit).await?;
            match args.json {
                true => println!("{}", serde_json::to_string_pretty(&list)?),
                false => print!("{}", render::plan_list(&list)),
            }
        }
    }
    Ok(())
}
