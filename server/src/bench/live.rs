//! `baton bench --live`: what open dashboard tabs cost the database, the
//! old way (each tab polls its page's server function every 2 s) and
//! through the live feed (each tab follows `/live/…`), with 1 and with 50
//! tabs on the overview and on a plan page.
//!
//! One in-process replica serves the real router on a free local port of
//! a scratch database (PostgreSQL when BATON_DATABASE_URL names one, else
//! SQLite) while it works through a steady load: a plan of 10 short runs
//! submitted every second, and the watched plan's runs moving four at a
//! time. So change signals arrive several times a second, the feed's
//! worst case: it then reads each watched view once per interval.
//!
//! Two counts per window. Page reads: every page's database work is one
//! call of the dashboard's engine seam, counted there
//! ([`CountedSource`]), whether a server function or the feed made it.
//! And on PostgreSQL, the database's own count of transactions
//! (`pg_stat_database`), which includes the load's: the row with no tab
//! open is that share.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use super::counted_source::CountedSource;
use crate::bench::scratch::Scratch;
use crate::config::Settings;
use crate::executor::Registry;
use crate::loops::{Replica, new_replica_id};
use crate::store::{ReplicaInfo, Store};
use domain::time::Ts;

/// How often a tab polled before the feed (the pages' old refresh).
const POLL_EVERY: Duration = Duration::from_secs(2);

/// Tabs per measurement.
const TABS: [usize; 2] = [1, 50];

pub async fn run(settings: &Settings, window: Duration) -> anyhow::Result<()> {
    let scratch = Scratch::new(&settings.database.url.0).await?;
    let result = bench(settings, &scratch, window).await;
    scratch.drop_database().await?;
    result
}

async fn bench(settings: &Settings, scratch: &Scratch, window: Duration) -> anyhow::Result<()> {
    let store = scratch.store().await?;
    let postgres = scratch.url.starts_with("postgres");
    let shutdown = CancellationToken::new();
    let info = ReplicaInfo {
        replica_id: new_replica_id(),
        hostname: "bench".into(),
        labels: Vec::new(),
        version: crate::serve::VERSION.into(),
        started_at: Ts::now(),
    };
    let replica = Replica::start(
        store.clone(),
        info.clone(),
        crate::loops::SchedulerConfig {
            workers: 32,
            ..settings.scheduler()
        },
        Registry::builtin(),
        shutdown.clone(),
    )
    .await?;
    let watched = submit(
        store.as_ref(),
        serde_json::json!({
            "name": "watched",
            "parallel_limit": 4,
            "tasks": (0..2_000)
                .map(|i| serde_json::json!({"name": format!("step-{i}"), "target": format!("db/{i}"), "sleep": "1s"}))
                .collect::<Vec<_>>(),
        }),
    )
    .await?;
    let load = tokio::spawn(steady_load(store.clone(), shutdown.clone()));

    let reads = Arc::new(AtomicU64::new(0));
    let source = Arc::new(CountedSource::new(
        Arc::new(crate::dashboard::StoreSource {
            store: store.clone(),
            stale_after: settings.stale_after,
            commands: settings.command_policy(),
        }),
        reads.clone(),
    ));
    let app =
        crate::serve::router_over(store.clone(), source, info, replica.view(), settings, None)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let serving = shutdown.clone();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(serving.cancelled_owned())
            .await
    });

    println!(
        "baton bench --live: {}, live interval {}, {} s per window; load: 10 runs/s submitted, plan {watched} moving 4 runs at a time",
        if postgres { "PostgreSQL" } else { "SQLite" },
        humantime::format_duration(settings.live_interval),
        window.as_secs()
    );
    println!(
        "{:<10} {:>5}  {:<20} {:>13} {:>17}",
        "page",
        "tabs",
        "refresh",
        "page reads/s",
        if postgres { "transactions/s" } else { "" }
    );
    let bench = Bench {
        client: reqwest::Client::new(),
        base,
        scratch,
        reads,
        window,
    };
    let idle = bench.measure(|| async { Ok(Vec::new()) }).await?;
    idle.print("(none)", 0, "-");
    let pages = [
        (
            "overview",
            "/live/overview".to_owned(),
            "/_fn/overview",
            String::new(),
        ),
        (
            "plan",
            format!("/live/plan/{watched}"),
            "/_fn/plan",
            format!("id={watched}&page=1"),
        ),
    ];
    for (name, feed, function, body) in &pages {
        for tabs in TABS {
            let figures = bench
                .measure(|| bench.pollers(tabs, function, body.clone()))
                .await?;
            figures.print(name, tabs, "polling every 2 s");
        }
        for tabs in TABS {
            let figures = bench.measure(|| bench.followers(tabs, feed)).await?;
            figures.print(name, tabs, "live feed");
            bench.until_no_feed().await?;
        }
    }
    shutdown.cancel();
    let _ = load.await;
    replica.join().await?;
    Ok(())
}

struct Bench<'a> {
    client: reqwest::Client,
    base: String,
    scratch: &'a Scratch,
    reads: Arc<AtomicU64>,
    window: Duration,
}

/// One window's rates.
struct Figures {
    reads: f64,
    transactions: Option<f64>,
}

impl Figures {
    fn print(&self, page: &str, tabs: usize, refresh: &str) {
        let transactions = self
            .transactions
            .map(|t| format!("{t:>17.1}"))
            .unwrap_or_default();
        println!(
            "{page:<10} {tabs:>5}  {refresh:<20} {:>13.1} {transactions}",
            self.reads
        );
    }
}

impl Bench<'_> {
    /// Starts the tabs `open` returns, lets them settle for one poll
    /// period, counts over the window, then closes them.
    async fn measure<F, Fut>(&self, open: F) -> anyhow::Result<Figures>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<Vec<tokio::task::JoinHandle<()>>>>,
    {
        let tabs = open().await?;
        tokio::time::sleep(POLL_EVERY).await;
        let reads = self.reads.load(Ordering::Relaxed);
        let transactions = self.scratch.transactions().await?;
        let started = Instant::now();
        tokio::time::sleep(self.window).await;
        let seconds = started.elapsed().as_secs_f64();
        let reads = (self.reads.load(Ordering::Relaxed) - reads) as f64 / seconds;
        let transactions = match (transactions, self.scratch.transactions().await?) {
            (Some(before), Some(after)) => Some((after - before) as f64 / seconds),
            _ => None,
        };
        for tab in tabs {
            tab.abort();
        }
        Ok(Figures {
            reads,
            transactions,
        })
    }

    /// `tabs` tabs calling `function` every 2 s, their starts spread over
    /// the period as real tabs' would be.
    async fn pollers(
        &self,
        tabs: usize,
        function: &str,
        body: String,
    ) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
        let url = format!("{}{function}", self.base);
        Ok((0..tabs)
            .map(|i| {
                let (client, url, body) = (self.client.clone(), url.clone(), body.clone());
                let offset = POLL_EVERY.mul_f64(i as f64 / tabs as f64);
                tokio::spawn(async move {
                    tokio::time::sleep(offset).await;
                    let mut every = tokio::time::interval(POLL_EVERY);
                    loop {
                        every.tick().await;
                        let sent = client
                            .post(&url)
                            .header("content-type", "application/x-www-form-urlencoded")
                            .body(body.clone())
                            .send()
                            .await;
                        if let Ok(response) = sent {
                            let _ = response.bytes().await;
                        }
                    }
                })
            })
            .collect())
    }

    /// `tabs` tabs following `feed`, each reading every event.
    async fn followers(
        &self,
        tabs: usize,
        feed: &str,
    ) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
        let url = format!("{}{feed}", self.base);
        let mut handles = Vec::with_capacity(tabs);
        for _ in 0..tabs {
            let mut response = self
                .client
                .get(&url)
                .header("accept", "text/event-stream")
                .send()
                .await?;
            anyhow::ensure!(
                response.status().is_success(),
                "GET {url} answered {}",
                response.status()
            );
            handles.push(tokio::spawn(async move {
                while let Ok(Some(_)) = response.chunk().await {}
            }));
        }
        Ok(handles)
    }

    /// Waits until the server has noticed the closed feeds and stopped
    /// their refresher, so the next window counts only its own tabs.
    async fn until_no_feed(&self) -> anyhow::Result<()> {
        let url = format!("{}/metrics", self.base);
        for _ in 0..300 {
            let text = self.client.get(&url).send().await?.text().await?;
            if text.lines().any(|l| l == "baton_live_views 0") {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::bail!("the live feed kept a refresher 30 s after its tabs closed")
    }
}

async fn submit(store: &dyn Store, plan: serde_json::Value) -> anyhow::Result<i64> {
    let plan = crate::plan::parse_json(plan.to_string().as_bytes())?;
    store
        .plan_insert(&plan, "bench".into(), Ts::now())
        .await
        .context("submitting a bench plan")
}

/// A plan of 10 short runs every second, until `shutdown`.
async fn steady_load(store: Arc<dyn Store>, shutdown: CancellationToken) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    for round in 0u64.. {
        tokio::select! {
            _ = every.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        let plan = serde_json::json!({
            "name": format!("load-{round}"),
            "tasks": (0..10)
                .map(|i| serde_json::json!({"name": format!("t{i}"), "target": format!("load/{i}"), "sleep": "200ms"}))
                .collect::<Vec<_>>(),
        });
        if let Err(e) = submit(store.as_ref(), plan).await {
            tracing::warn!(error = %e, "the bench load could not submit");
        }
    }
}
