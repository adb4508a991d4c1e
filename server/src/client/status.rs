//! `baton status [PLAN]` (or `baton plans`): the newest plans with their
//! tasks counted by status, or one plan with every task, its status and
//! why it waits; with `--act`, Retry, Cancel or Skip all on the runs of
//! every plan the list's filter matches.

use anyhow::bail;
use clap::Args;
use domain::search::{BulkAction, BulkResult, PlanQuery};

use super::bulk::{confirm, parse_action, run_count};
use super::{ApiClient, ServerArg, render};

#[derive(Args, Debug, Clone)]
pub struct StatusArgs {
    /// A plan id: show that plan's tasks. Without it, list plans.
    pub plan: Option<i64>,
    /// List only plans in this status (NOT_STARTED, RUNNING, HALTED,
    /// FAILED, DONE, CANCELED); FAILED includes HALTED.
    #[arg(long, conflicts_with = "plan")]
    pub status: Option<String>,
    /// With a plan id: follow it until it is settled, exiting 0 when it is
    /// DONE and 1 when it FAILED, was CANCELED or HALTED (as `submit
    /// --wait`).
    #[arg(long, requires = "plan")]
    pub wait: bool,
    /// List only plans whose name contains this, any case.
    #[arg(long, conflicts_with = "plan")]
    pub name: Option<String>,
    /// Plans to list, newest first.
    #[arg(long, default_value_t = 20, conflicts_with = "plan")]
    pub limit: i64,
    /// Instead of listing: retry, cancel or skip the runs of every plan
    /// --status and --name match that the action applies to (operators
    /// only).
    #[arg(long, value_parser = parse_action, conflicts_with = "plan")]
    pub act: Option<BulkAction>,
    /// With --act: the number of runs you expect it to change; if the
    /// plans hold another number, nothing changes. Without it the count is
    /// shown and confirmed on a terminal.
    #[arg(long, requires = "act")]
    pub expect: Option<i64>,
    /// With --act: do not ask, act on the count just read.
    #[arg(long, requires = "act")]
    pub yes: bool,
    /// Print what the API returns (JSON) instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub server: ServerArg,
}

pub async fn status(args: StatusArgs, listen: std::net::SocketAddr) -> anyhow::Result<()> {
    let client = args.server.client(listen)?;
    match args.plan {
        Some(id) if args.wait => {
            let view = client.plan(id).await?;
            super::submit::print_plan(&view, &client, args.json)?;
            return super::submit::wait_for_end(&client, view, args.json).await;
        }
        Some(id) => {
            let view = client.plan(id).await?;
            match args.json {
                true => println!("{}", serde_json::to_string_pretty(&view)?),
                false => super::show(&render::plan(&view, client.base())),
            }
        }
        None if args.act.is_some() => return act(&args, &client).await,
        None => {
            let list = client
                .plans(args.status.as_deref(), args.name.as_deref(), args.limit)
                .await?;
            match args.json {
                true => println!("{}", serde_json::to_string_pretty(&list)?),
                false => super::show(&render::plan_list(&list)),
            }
        }
    }
    Ok(())
}

/// `--act`: counts what the action would change, asks (unless `--expect`
/// or `--yes`), and acts bound to that count.
async fn act(args: &StatusArgs, client: &ApiClient) -> anyhow::Result<()> {
    let action = args.act.expect("called with --act");
    let filter = PlanQuery {
        status: args.status.clone(),
        name: args.name.clone(),
    };
    let expected = match args.expect {
        Some(n) => n,
        None => {
            let count = client.plans_bulk_counts(&filter).await?.of(action);
            let n = count.runs;
            if n == 0 {
                println!(
                    "no run of the plans this filter matches can be {}",
                    action.past()
                );
                return Ok(());
            }
            let plans = if count.plans == 1 { "plan" } else { "plans" };
            let question = format!(
                "{} the {n} runs in {} {plans} this filter matches?",
                action.label(),
                count.plans
            );
            if !args.yes && !confirm(&question, action, n)? {
                bail!("nothing was changed");
            }
            n
        }
    };
    let done: BulkResult = client
        .post(
            "plans/bulk",
            Some(serde_json::json!({"action": action, "filter": filter, "expected": expected})),
        )
        .await?;
    println!("{} {}", done.action.past(), run_count(done.changed));
    Ok(())
}
