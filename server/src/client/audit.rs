//! `baton audit`: the audit log from the command line, newest first,
//! filtered as on the dashboard's Audit page.

use clap::Args;
use domain::audit::AuditQuery;

use super::{ServerArg, render};

#[derive(Args, Debug, Clone)]
pub struct AuditArgs {
    /// Only entries by this person (for a failed sign-in, the name tried).
    #[arg(long)]
    pub actor: Option<String>,
    /// Only actions starting with this: `task.`, `runs.bulk_retry`,
    /// `auth.sign_in_failed`.
    #[arg(long)]
    pub action: Option<String>,
    /// Only entries whose subject contains this, any case: a plan, task,
    /// schedule or target name.
    #[arg(long)]
    pub subject: Option<String>,
    /// Only entries since: a duration ago (`1h`, `7d`) or a time
    /// (`2026-11-25T10:00`, UTC).
    #[arg(long)]
    pub since: Option<String>,
    /// Only entries before; the same forms as --since.
    #[arg(long)]
    pub until: Option<String>,
    /// Entries to list.
    #[arg(long, default_value_t = 50)]
    pub limit: i64,
    /// Only entries older than this id (the `next` a listing prints).
    #[arg(long)]
    pub before: Option<i64>,
    /// Print what the API returns (JSON) instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub server: ServerArg,
}

pub async fn audit(args: AuditArgs, listen: std::net::SocketAddr) -> anyhow::Result<()> {
    let client = args.server.client(listen)?;
    let filter = AuditQuery {
        actor: args.actor,
        action: args.action,
        subject: args.subject,
        since: args.since,
        until: args.until,
    };
    let list = client.audit(&filter, args.before, args.limit).await?;
    match args.json {
        true => println!("{}", serde_json::to_string_pretty(&list)?),
        false => super::show(&render::audit_list(&list)),
    }
    Ok(())
}
