//! `baton plan export ID [--yaml]`: the plan file that submits a plan
//! again, on standard output (`baton plan export 7 --yaml > again.yaml`,
//! edit, `baton submit again.yaml`). It holds the plan's secrets, so the
//! server answers operators only.

use clap::{Args, Subcommand};

use super::ServerArg;

#[derive(Args, Debug, Clone)]
pub struct PlanArgs {
    #[command(subcommand)]
    pub command: PlanCommand,
}

#[derive(Subcommand, Debug, Clone)]
pub enum PlanCommand {
    /// Print the plan file that submits plan ID again (JSON; YAML with
    /// --yaml), secrets included: operators only.
    Export(ExportArgs),
}

#[derive(Args, Debug, Clone)]
pub struct ExportArgs {
    /// The plan id.
    pub plan: i64,
    /// YAML instead of JSON.
    #[arg(long)]
    pub yaml: bool,
    #[command(flatten)]
    pub server: ServerArg,
}

pub async fn plan(args: PlanArgs, listen: std::net::SocketAddr) -> anyhow::Result<()> {
    let PlanCommand::Export(args) = args.command;
    let client = args.server.client(listen)?;
    let format = if args.yaml { "yaml" } else { "json" };
    let text = client
        .get_text(&format!("plans/{}/export?format={format}", args.plan))
        .await?;
    let text = if args.yaml {
        text
    } else {
        // The server answers compact JSON; people read and edit this.
        let value: serde_json::Value = serde_json::from_str(&text)?;
        serde_json::to_string_pretty(&value)?
    };
    print!("{text}");
    if !text.ends_with('\n') {
        println!();
    }
    Ok(())
}
