//! `baton schedule …`: create, list, show, edit, pause, resume, trigger
//! and delete schedules through the API.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use domain::model::{PlanView, ScheduleView};

use super::submit::{format_of, read_plan_file};
use super::{ApiClient, ServerArg, render};

#[derive(Args, Debug, Clone)]
pub struct ScheduleArgs {
    #[command(subcommand)]
    pub command: ScheduleCommand,
    #[command(flatten)]
    pub server: ServerArg,
}

#[derive(Subcommand, Debug, Clone)]
pub enum ScheduleCommand {
    /// Create a schedule from a file (JSON or YAML; `-` reads standard
    /// input).
    Create { file: PathBuf },
    /// Every schedule: its expression, next tick and last plan.
    List {
        /// Print what the API returns (JSON) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One schedule (id or name): next ticks, last plans and ticks.
    Show {
        schedule: String,
        #[arg(long)]
        json: bool,
    },
    /// Replace a schedule's file.
    Update { schedule: String, file: PathBuf },
    /// Its ticks make no plan until it is resumed.
    Pause { schedule: String },
    /// From its next tick after now.
    Resume { schedule: String },
    /// Make and start a plan from it now, whatever its overlap policy.
    Trigger { schedule: String },
    /// Delete it; the plans it made stay.
    Delete { schedule: String },
}

pub async fn schedule(args: ScheduleArgs, listen: std::net::SocketAddr) -> anyhow::Result<()> {
    let client = args.server.client(listen)?;
    let changed: ScheduleView = match args.command {
        ScheduleCommand::Create { file } => {
            let body = read_plan_file(&file)?;
            let format = format_of(&file, &body);
            client
                .send_file(reqwest::Method::POST, "schedules", body, format)
                .await?
        }
        ScheduleCommand::List { json } => {
            let all: Vec<ScheduleView> = client.get("schedules").await?;
            match json {
                true => println!("{}", serde_json::to_string_pretty(&all)?),
                false => super::show(&table(&all)),
            }
            return Ok(());
        }
        ScheduleCommand::Show { schedule, json } => {
            let id = resolve(&client, &schedule).await?;
            let view: ScheduleView = client.get(&format!("schedules/{id}")).await?;
            match json {
                true => println!("{}", serde_json::to_string_pretty(&view)?),
                false => super::show(&detail(&view)),
            }
            return Ok(());
        }
        ScheduleCommand::Update { schedule, file } => {
            let id = resolve(&client, &schedule).await?;
            let body = read_plan_file(&file)?;
            let format = format_of(&file, &body);
            client
                .send_file(
                    reqwest::Method::PUT,
                    &format!("schedules/{id}"),
                    body,
                    format,
                )
                .await?
        }
        ScheduleCommand::Pause { schedule } => {
            let id = resolve(&client, &schedule).await?;
            client.post(&format!("schedules/{id}/pause"), None).await?
        }
        ScheduleCommand::Resume { schedule } => {
            let id = resolve(&client, &schedule).await?;
            client.post(&format!("schedules/{id}/resume"), None).await?
        }
        ScheduleCommand::Trigger { schedule } => {
            let id = resolve(&client, &schedule).await?;
            let plan: PlanView = client
                .post(&format!("schedules/{id}/trigger"), None)
                .await?;
            super::show(&render::plan(&plan, client.base()));
            return Ok(());
        }
        ScheduleCommand::Delete { schedule } => {
            let id = resolve(&client, &schedule).await?;
            client.delete(&format!("schedules/{id}")).await?;
            println!("schedule {schedule} deleted; the plans it made stay");
            return Ok(());
        }
    };
    super::show(&detail(&changed));
    Ok(())
}

/// A schedule named by id, or by name.
async fn resolve(client: &ApiClient, schedule: &str) -> anyhow::Result<i64> {
    if let Ok(id) = schedule.parse::<i64>() {
        return Ok(id);
    }
    let all: Vec<ScheduleView> = client.get("schedules").await?;
    all.iter()
        .find(|s| s.name == schedule)
        .map(|s| s.id)
        .ok_or_else(|| anyhow::anyhow!("no schedule named {schedule}"))
}

fn table(all: &[ScheduleView]) -> String {
    if all.is_empty() {
        return "no schedules\n".into();
    }
    let mut out = format!(
        "{:<5} {:<24} {:<16} {:<16} {:<22} {}\n",
        "ID", "NAME", "CRON", "ZONE", "NEXT (UTC)", "LAST PLAN"
    );
    for s in all {
        let next = match (&s.paused_by, s.next_ticks.first()) {
            (Some(by), _) => format!("paused by {by}"),
            (None, Some(at)) => at.format("%Y-%m-%d %H:%M:%S").to_string(),
            (None, None) => "never".into(),
        };
        let last = s
            .plans
            .first()
            .map(|p| format!("#{} {}", p.id, p.status))
            .unwrap_or_else(|| "—".into());
        let _ = writeln!(
            out,
            "{:<5} {:<24} {:<16} {:<16} {:<22} {}",
            s.id, s.name, s.cron, s.time_zone, next, last
        );
    }
    out
}

fn detail(s: &ScheduleView) -> String {
    let mut out = format!(
        "schedule {} {}: {} — {}\noverlap {}, catch-up {}{}\n",
        s.id,
        s.name,
        s.cron,
        s.description,
        s.overlap,
        s.catch_up,
        s.catch_up_limit
            .map(|n| format!(" (up to {n})"))
            .unwrap_or_default()
    );
    if let Some(by) = &s.paused_by {
        let _ = writeln!(out, "paused by {by}");
    }
    for at in &s.next_ticks {
        let _ = writeln!(out, "next  {}", at.format("%Y-%m-%d %H:%M:%S UTC"));
    }
    for p in &s.plans {
        let _ = writeln!(
            out,
            "plan  #{} {} {}{}",
            p.id,
            p.status,
            p.name,
            if p.queued { " (queued)" } else { "" }
        );
    }
    for t in &s.ticks {
        let _ = writeln!(
            out,
            "tick  {} {}{}",
            t.tick_at.format("%Y-%m-%d %H:%M:%S"),
            t.outcome,
            t.detail
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        );
    }
    out
}
