//! `baton submit FILE`: send a plan file to a running server, print the
//! plan, and with `--wait` follow it to its end, for deploy scripts that
//! must stop when a step fails.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use domain::model::{PlanStatus, PlanView, TaskStatus};

use super::api_client::{ApiClient, PlanFormat};
use super::progress::Progress;
use super::{ServerArg, render};

/// How often `--wait` looks at the plan.
const WAIT_POLL: Duration = Duration::from_millis(500);

#[derive(Args, Debug, Clone)]
pub struct SubmitArgs {
    /// The plan file: JSON (`.json`) or YAML (`.yaml`, `.yml`); `-` reads
    /// standard input. Other names are read as JSON when they start with
    /// `{`, else as YAML.
    pub file: PathBuf,
    /// Follow the plan until it ends: exit 0 when it is DONE, 1 when it
    /// FAILED, was CANCELED, or HALTED (nothing can move until an operator
    /// retries or skips a task; the blocked tasks are printed).
    #[arg(long)]
    pub wait: bool,
    /// Print the plan as the API returns it (JSON) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Sent as `Idempotency-Key`: the same key and file within 24 hours
    /// make one plan however often they are sent, so a submit that timed
    /// out is retried safely (this command does, up to 4 tries). Choose a
    /// key per intended plan, e.g. `release-42-$(git rev-parse HEAD)`.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    #[command(flatten)]
    pub server: ServerArg,
}

pub async fn submit(args: SubmitArgs, listen: std::net::SocketAddr) -> anyhow::Result<()> {
    let body = read_plan_file(&args.file)?;
    let format = format_of(&args.file, &body);
    let client = args.server.client(listen)?;
    let submitted = match &args.idempotency_key {
        Some(key) => client.submit_keyed(body, format, key).await,
        None => client.submit(body, format).await,
    };
    let view = submitted.with_context(|| format!("{} was not submitted", args.file.display()))?;
    print_plan(&view, &client, args.json)?;
    if !args.wait {
        return Ok(());
    }
    wait_for_end(&client, view, args.json).await
}

/// `--wait`: follows the plan until it is settled; Ok only when DONE.
pub(super) async fn wait_for_end(
    client: &ApiClient,
    view: PlanView,
    json: bool,
) -> anyhow::Result<()> {
    let last = follow(client, view).await?;
    if json {
        print_plan(&last, client, true)?;
    }
    match last.status {
        PlanStatus::Done => Ok(()),
        PlanStatus::Halted => bail!(
            "plan {} {} is HALTED: nothing can move until a task is retried or skipped{}",
            last.id,
            last.name,
            blocked_tasks(&last)
        ),
        status => bail!("plan {} {} ended {status}", last.id, last.name),
    }
}

/// The halted tasks and their causes, a line each (the first five).
fn blocked_tasks(view: &PlanView) -> String {
    let blocked: Vec<String> = view
        .tasks
        .iter()
        .filter_map(|t| {
            let cause = t.waiting_cause.as_deref()?;
            cause
                .starts_with(domain::model::BLOCKED_CAUSE)
                .then(|| format!("\n  {}: {cause}", t.name))
        })
        .collect();
    let more = blocked.len().saturating_sub(5);
    let mut text: String = blocked.into_iter().take(5).collect();
    if more > 0 {
        text.push_str(&format!("\n  … and {more} more"));
    }
    text
}

/// The plan file's bytes, at most one more than the server takes: a
/// mistaken `/dev/zero` (or a 2 GB file) was read until memory ran out.
pub(super) fn read_plan_file(path: &Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    let limit = crate::plan::limits::MAX_PLAN_BODY_BYTES as u64;
    let mut body = Vec::new();
    if path == Path::new("-") {
        std::io::stdin()
            .take(limit + 1)
            .read_to_end(&mut body)
            .context("cannot read the plan from standard input")?;
    } else {
        std::fs::File::open(path)
            .and_then(|file| file.take(limit + 1).read_to_end(&mut body))
            .with_context(|| format!("cannot read plan file {}", path.display()))?;
    }
    anyhow::ensure!(
        body.len() as u64 <= limit,
        "the plan is larger than the server's limit of {} MiB",
        limit / (1024 * 1024)
    );
    Ok(body)
}

pub(super) fn format_of(path: &Path, body: &[u8]) -> PlanFormat {
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("json") => PlanFormat::Json,
        Some(e) if e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml") => {
            PlanFormat::Yaml
        }
        _ if body.trim_ascii_start().starts_with(b"{") => PlanFormat::Json,
        _ => PlanFormat::Yaml,
    }
}

pub(super) fn print_plan(view: &PlanView, client: &ApiClient, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(view)?);
    } else {
        super::show(&render::plan(view, client.base()));
    }
    Ok(())
}

/// Prints each task's status changes, under a progress line, until the
/// plan is settled (DONE, FAILED, CANCELED or HALTED); the last view. Progress goes to
/// stderr, so `--json` leaves stdout to the plan alone.
async fn follow(client: &ApiClient, first: PlanView) -> anyhow::Result<PlanView> {
    let mut seen: HashMap<i64, (TaskStatus, Option<i64>)> = first
        .tasks
        .iter()
        .map(|t| (t.id, (t.status, t.attempt)))
        .collect();
    let mut said_not_started = false;
    let mut progress = Progress::new(first.tasks.len() as u64, "tasks done");
    let mut view = first;
    loop {
        let (done, detail) = tally(&view);
        progress.update(done, view.tasks.len() as u64, &detail);
        match view.status {
            status if status.is_settled() => {
                progress.finish();
                return Ok(view);
            }
            PlanStatus::NotStarted if !said_not_started => {
                progress.println(&format!("plan {} waits for an operator to run it", view.id));
                said_not_started = true;
            }
            _ => {}
        }
        tokio::time::sleep(WAIT_POLL).await;
        view = client.plan(view.id).await?;
        for task in &view.tasks {
            let now = (task.status, task.attempt);
            if seen.insert(task.id, now) != Some(now) {
                let attempt = task.attempt.map(|a| format!(" #{a}")).unwrap_or_default();
                let why = task
                    .error
                    .as_deref()
                    .filter(|_| matches!(task.status, TaskStatus::Failed | TaskStatus::Canceled))
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default();
                progress.println(&format!("{}{attempt} {}{why}", task.name, task.status));
            }
        }
    }
}

/// Tasks done (DONE or SKIPPED), and what else the line says: how many
/// run, wait and ended badly.
fn tally(view: &PlanView) -> (u64, String) {
    let count = |wanted: &[TaskStatus]| {
        view.tasks
            .iter()
            .filter(|t| wanted.contains(&t.status))
            .count()
    };
    let done = count(&[TaskStatus::Done, TaskStatus::Skipped]) as u64;
    let running = count(&[TaskStatus::Running, TaskStatus::Available]);
    let waiting = count(&[TaskStatus::Pending, TaskStatus::NotStarted]);
    let failed = count(&[TaskStatus::Failed, TaskStatus::Canceled]);
    let mut detail = format!(", {running} running, {waiting} waiting");
    if failed > 0 {
        detail.push_str(&format!(", {failed} failed or canceled"));
    }
    (done, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extension_decides_the_format_and_else_the_first_character() {
        assert_eq!(format_of(Path::new("p.json"), b"name: x"), PlanFormat::Json);
        assert_eq!(format_of(Path::new("p.YML"), b"{}"), PlanFormat::Yaml);
        assert_eq!(
            format_of(Path::new("-"), b"  {\"name\": 1}"),
            PlanFormat::Json
        );
        assert_eq!(format_of(Path::new("plan"), b"name: x"), PlanFormat::Yaml);
    }
}
