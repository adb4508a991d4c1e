//! `baton pause`, `baton resume`, `baton paused`, `baton target …` and
//! `baton workers …`: the workflow gates and the workers from the command
//! line, through the API.

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
/// `baton workers [drain|resume ID]`: the list, or a drain started or
/// lifted.
#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true)]
pub struct WorkersArgs {
    #[command(subcommand)]
    pub command: Option<WorkersCommand>,
    /// Print what the API returns (JSON) instead of tables.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub server: ServerArg,
}

#[derive(Subcommand, Debug, Clone)]
pub enum WorkersCommand {
    /// The replica or agent WORKER (its id, as listed) takes no new run and
    /// finishes those it runs; runs pinned to its labels are reassigned as
    /// from a dead worker.
    Drain {
        worker: String,
        #[command(flatten)]
        server: ServerArg,
    },
    /// WORKER takes runs again.
    Resume {
        worker: String,
        #[command(flatten)]
        server: ServerArg,
    },
}

pub async fn workers(args: WorkersArgs, listen: std::net::SocketAddr) -> anyhow::Result<()> {
    let (verb, worker, server) = match args.command {
        None => {
            let client = args.server.client(listen)?;
            let workers: Vec<domain::model::ReplicaView> = client.get("replicas").await?;
            match args.json {
                true => println!("{}", serde_json::to_string_pretty(&workers)?),
                false => super::show(&render::workers(&workers)),
            }
            return Ok(());
        }
        Some(WorkersCommand::Drain { worker, server }) => ("drain", worker, server),
        Some(WorkersCommand::Resume { worker, server }) => ("resume", worker, server),
    };
    let client = server.client(listen)?;
    let path = format!("replicas/{}/{verb}", path_segment(&worker));
    let changed: domain::model::ReplicaView = client.post(&path, None).await?;
    super::show(&render::workers(&[changed]));
    Ok(())
}

/// `id` as one path segment: an id holding `/` or `?` (none of Baton's
/// do) reaches the API as the text it is, to be refused as unknown.
fn path_segment(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A listing (`paused`): tables, or the API's JSON.
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
