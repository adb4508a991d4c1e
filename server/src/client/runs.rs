//! `baton runs`: the runs search from the command line, newest first,
//! filtered as on the dashboard's Runs page.

use anyhow::bail;
use clap::Args;
use domain::search::{BulkAction, BulkCounts, BulkResult, RunQuery};

use super::bulk::{confirm, parse_action, run_count};
use super::{ServerArg, render};

#[derive(Args, Debug, Clone)]
pub struct RunsArgs {
    /// Only runs in this status (PENDING, AVAILABLE, RUNNING, DONE, FAILED,
    /// CANCELED).
    #[arg(long)]
    pub status: Option<String>,
    /// Only runs on targets whose name starts with this (`db/`).
    #[arg(long)]
    pub target: Option<String>,
    /// Only runs of plans whose name contains this, any case.
    #[arg(long)]
    pub plan: Option<String>,
    /// Only runs this replica ran.
    #[arg(long)]
    pub replica: Option<String>,
    /// Only runs this person submitted, retried, cancelled or approved.
    #[arg(long)]
    pub actor: Option<String>,
    /// Only FAILED or CANCELED runs whose error contains this, any case.
    #[arg(long)]
    pub error: Option<String>,
    /// Only runs finished since: a duration ago (`1h`, `7d`) or a time
    /// (`2026-11-25T10:00`, UTC).
    #[arg(long)]
    pub since: Option<String>,
    /// Only runs finished before; the same forms as --since.
    #[arg(long)]
    pub until: Option<String>,
    /// Runs to list.
    #[arg(long, default_value_t = 50)]
    pub limit: i64,
    /// Only runs older than this run id (the `next` a listing prints).
    #[arg(long)]
    pub before: Option<i64>,
    /// Print what the API returns (JSON) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Instead of listing: retry, cancel or skip every run the filter
    /// matches that the action applies to (operators only).
    #[arg(long, value_parser = parse_action)]
    pub act: Option<BulkAction>,
    /// With --act: the number of runs you expect it to change; if the
    /// filter matches another number, nothing changes. Without it the
    /// count is shown and confirmed on a terminal.
    #[arg(long, requires = "act")]
    pub expect: Option<i64>,
    /// With --act: do not ask, act on the count just read.
    #[arg(long, requires = "act")]
    pub yes: bool,
    #[command(flatten)]
    pub server: ServerArg,
}

pub async fn runs(args: RunsArgs, listen: std::net::SocketAddr) -> anyhow::Result<()> {
    let client = args.server.client(listen)?;
    let filter = RunQuery {
        status: args.status,
        target: args.target,
        plan: args.plan,
        replica: args.replica,
        actor: args.actor,
        error: args.error,
        since: args.since,
        until: args.until,
    };
    if let Some(action) = args.act {
        let expected = match args.expect {
            Some(n) => n,
            None => {
                let counts: BulkCounts = client.runs_bulk_counts(&filter).await?;
                let n = counts.of(action);
                if n == 0 {
                    println!("no run this filter matches can be {}", action.past());
                    return Ok(());
                }
                let question = format!("{} the {n} runs this filter matches?", action.label());
                if !args.yes && !confirm(&question, action, n)? {
                    bail!("nothing was changed");
                }
                n
            }
        };
        let done: BulkResult = client
            .post(
                "runs/bulk",
                Some(serde_json::json!({"action": action, "filter": filter, "expected": expected})),
            )
            .await?;
        println!("{} {}", done.action.past(), run_count(done.changed));
        return Ok(());
    }
    let list = client.runs(&filter, args.before, args.limit).await?;
    match args.json {
        true => println!("{}", serde_json::to_string_pretty(&list)?),
        false => super::show(&render::run_list(&list)),
    }
    Ok(())
}
