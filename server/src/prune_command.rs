//! `baton prune --older-than 7d [--dry-run]`: one prune, now, straight
//! against the database (as `baton migrate` is), whether or not replicas
//! run; theirs and this one re-check every plan, so they can overlap.

use std::time::Duration;

use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::client::progress::Progress;
use crate::config::DatabaseArg;
use crate::retention::{PAUSE, Retain, prune, prune_dry_run};
use domain::time::Ts;

#[derive(Args, Debug, Clone)]
pub struct PruneArgs {
    #[command(flatten)]
    pub database: DatabaseArg,
    /// Delete finished plans whose last change is older than this (`7d`,
    /// `12h`; at least 1m).
    #[arg(long, value_parser = parse_older_than)]
    pub older_than: Duration,
    /// Count what would be deleted, and delete nothing.
    #[arg(long)]
    pub dry_run: bool,
}

fn parse_older_than(s: &str) -> Result<Duration, String> {
    match s.parse::<Retain>()? {
        Retain::For(d) => Ok(d),
        Retain::Forever => Err("`forever` keeps everything: there is nothing to prune".into()),
    }
}

pub async fn prune_command(args: PruneArgs) -> anyhow::Result<()> {
    let url = &args.database.url.0;
    // Opening SQLite creates a missing file; a mistyped path must not
    // leave an empty database behind.
    if let Some(path) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    {
        anyhow::ensure!(
            std::path::Path::new(path).is_file(),
            "no SQLite database at {path}: nothing to prune (check BATON_DATABASE_URL)"
        );
    }
    let store = crate::store::connect(url).await?;
    // Refuses an unmigrated database rather than searching without the
    // index the search needs.
    store.ready().await?;
    let cutoff = Ts::now().minus(args.older_than);
    let (plans, runs) = prune_dry_run(&*store, cutoff).await?;
    let what = format!(
        "{plans} finished plans (about {runs} runs) unchanged since {}",
        cutoff.date_time()
    );
    if args.dry_run {
        println!("would delete {what}");
        return Ok(());
    }
    if plans == 0 {
        println!(
            "nothing to prune: no finished plan unchanged since {}",
            cutoff.date_time()
        );
        return Ok(());
    }
    println!("deleting {what}");
    // Ctrl-C stops after the batch in flight: every batch is whole plans.
    let stop = CancellationToken::new();
    let stopping = stop.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            stopping.cancel();
        }
    });
    let mut progress = Progress::new(plans, "plans pruned");
    let report = prune(&*store, cutoff, PAUSE, &stop, |done| {
        progress.update(
            done.plans,
            plans.max(done.plans),
            &format!(", {} runs", done.runs),
        )
    })
    .await?;
    progress.finish();
    println!(
        "deleted {} plans: {} tasks, {} runs, {} events, {} log lines, {} webhook deliveries{}",
        report.plans,
        report.tasks,
        report.runs,
        report.events,
        report.logs,
        report.deliveries,
        if stop.is_cancelled() {
            " (interrupted; the rest stays)"
        } else {
            ""
        }
    );
    Ok(())
}
