//! `baton pause`, `baton resume`, `baton paused` and `baton target …`:
//! the workflow gates from the command line, through the API.

use clap::{Args, Subcommand};
use domain::model::{PlanView, TargetView};
use serde_json::json;

use super::{ServerArg, render};

#[derive(Args, Debug, Clone)]
pub struct PlanArg {
    /// The plan id.
    pub plan: i64,
    #[command(flatten)]
    pub server: ServerArg,
}

#[derive(Args, Debug, Clone)]
pub struct TargetArgs {
    #[command(subcommand)]
    pub command: TargetCommand,
    #[command(flatten)]
    pub server: ServerArg,
}

#[derive(Subcommand, Debug, Clone)]
pub enum TargetCommand {
    /// Targets with live runs or settings: what holds each, what waits,
    /// capacity, paused or not.
    List {
        /// Print what the API returns (JSON) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Promote no run on TARGET, in any plan, until it is resumed.
    Pause {
        target: String,
    },
    Resume {
        target: String,
    },
    /// At most N runs hold TARGET at once (an exclusive run takes all of
    /// it); `none` removes the limit.
    Capacity {
        target: String,
        capacity: String,
    },
}

pub async fn pause(
    args: PlanArg,
    listen: std::net::SocketAddr,
    resume: bool,
) -> anyhow::Result<()> {
    let client = args.server.client(listen)?;
    let verb = if resume { "resume" } else { "pause" };
    let view: PlanView = client
        .post(&format!("plans/{}/{verb}", args.plan), None)
        .await?;
    super::show(&render::plan(&view, client.base()));
    Ok(())
}

/// `baton paused`: every paused plan and target.
pub async fn paused(
    server: ServerArg,
    json: bool,
    listen: std::net::SocketAddr,
) -> anyhow::Result<()> {
    let client = server.client(listen)?;
    let view: domain::model::PausedView = client.get("paused").await?;
    match json {
        true => println!("{}", serde_json::to_string_pretty(&view)?),
        false => super::show(&render::paused(&view)),
    }
    Ok(())
}

/// `baton workers`: every replica and agent with a heartbeat row.
pub async fn workers(
    server: ServerArg,
    json: bool,
    listen: std::net::SocketAddr,
) -> anyhow::Result<()> {
    let client = server.client(listen)?;
    let workers: Vec<domain::model::ReplicaView> = client.get("replicas").await?;
    match json {
        true => println!("{}", serde_json::to_string_pretty(&workers)?),
        false => super::show(&render::workers(&workers)),
    }
    Ok(())
}

/// A listing (`paused`, `workers`): tables, or the API's JSON.
#[derive(Args, Debug, Clone)]
pub struct ListArgs {
    /// Print what the API returns (JSON) instead of tables.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub server: ServerArg,
}

pub async fn target(args: TargetArgs, listen: std::net::SocketAddr) -> anyhow::Result<()> {
    let client = args.server.client(listen)?;
    let changed: TargetView = match args.command {
        TargetCommand::List { json } => {
            let targets = client.targets().await?;
            match json {
                true => println!("{}", serde_json::to_string_pretty(&targets)?),
                false => super::show(&render::targets(&targets)),
            }
            return Ok(());
        }
        TargetCommand::Pause { target } => {
            client
                .post("targets/pause", Some(json!({ "target": target })))
                .await?
        }
        TargetCommand::Resume { target } => {
            client
                .post("targets/resume", Some(json!({ "target": target })))
                .await?
        }
        TargetCommand::Capacity { target, capacity } => {
            let capacity: Option<i64> = match capacity.trim() {
                "none" | "null" => None,
                n => Some(n.parse().map_err(|_| {
                    anyhow::anyhow!("capacity must be a whole number or `none` (got {n})")
                })?),
            };
            client
                .post(
                    "targets/capacity",
                    Some(json!({ "target": target, "capacity": capacity })),
                )
                .await?
        }
    };
    super::show(&render::targets(&[changed]));
    Ok(())
}
