//! `baton bench --render`: how long the dashboard takes to render its
//! heaviest pages server-side with a large history stored, and
//! `baton bench --seed`: write that history into the configured database
//! to browse it.
//!
//! The render bench seeds a scratch database (PostgreSQL when
//! BATON_DATABASE_URL names one, else SQLite), serves the real router on a
//! free local port, and times complete GET responses (SSR waits for all
//! data before answering, so the response time is the render time).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::bench::scratch::Scratch;
use crate::bench::seed::{SeedSpec, Seeded, seed};
use crate::client::progress::Progress;
use crate::config::Settings;
use crate::store::{self, ReplicaInfo, Store};
use domain::time::Ts;

/// Seeds the configured database (migrating it first).
pub async fn seed_configured(settings: &Settings, spec: SeedSpec) -> anyhow::Result<()> {
    let url = &settings.database.url.0;
    let store = store::connect(url).await?;
    store.migrate().await.context("applying migrations")?;
    drop(store);
    let seeded = seed_with_progress(url, spec).await?;
    println!(
        "seeded {} runs into {} in {:.1} s; plan {} is the {}-task plan in flight",
        seeded.runs,
        store::redact(url),
        seeded.seconds,
        seeded.big_plan,
        spec.big_plan_tasks
    );
    Ok(())
}

pub async fn run(settings: &Settings, spec: SeedSpec, requests: usize) -> anyhow::Result<()> {
    let url = &settings.database.url.0;
    let scratch = Scratch::new(url).await?;
    let result = bench(settings, &scratch, spec, requests).await;
    scratch.drop_database().await?;
    result
}

async fn bench(
    settings: &Settings,
    scratch: &Scratch,
    spec: SeedSpec,
    requests: usize,
) -> anyhow::Result<()> {
    let store = scratch.store().await?;
    let seeded = seed_with_progress(&scratch.url, spec).await?;
    let backend = if scratch.url.starts_with("postgres") {
        "PostgreSQL"
    } else {
        "SQLite"
    };
    println!(
        "baton bench --render: {backend}, {} runs ({} plans x {} tasks + one plan of {}), seeded in {:.1} s",
        seeded.runs, spec.plans, spec.tasks, spec.big_plan_tasks, seeded.seconds
    );
    let base = serve_in_background(store.clone(), settings).await?;
    let client = reqwest::Client::new();
    let a_run = seeded.big_plan_first_run(store.as_ref()).await?;
    let deep_page = (spec.plans / 50 / 2).max(1);
    let pages = [
        ("overview", "/".to_owned()),
        ("plans, first page", "/plans".to_owned()),
        (
            "plans, page in the middle",
            format!("/plans?page={deep_page}"),
        ),
        ("plans, status FAILED", "/plans?status=FAILED".to_owned()),
        ("plans, name search", "/plans?q=seed-9999".to_owned()),
        // Before a bulk action on the plans list: the runs it would retry
        // in every FAILED plan.
        (
            "plans, Retry all confirm",
            "/plans?status=FAILED&confirm=retry".to_owned(),
        ),
        ("plan of 1,000 tasks", format!("/plans/{}", seeded.big_plan)),
        ("run", format!("/runs/{a_run}")),
        ("replicas", "/replicas".to_owned()),
        ("deliveries", "/deliveries".to_owned()),
        // The runs search, one filter at a time; "rare" filters match too
        // few of the newest runs to fill a page and go through an index.
        ("runs, newest", "/runs".to_owned()),
        ("runs, status FAILED", "/runs?status=FAILED".to_owned()),
        ("runs, status PENDING", "/runs?status=PENDING".to_owned()),
        ("runs, target db/ (common)", "/runs?target=db/".to_owned()),
        ("runs, target (rare)", "/runs?target=db/shard-42".to_owned()),
        // Only in the oldest 2,000 runs: read back through everything.
        (
            "runs, target (oldest only)",
            "/runs?target=db/legacy".to_owned(),
        ),
        ("runs, plan name", "/runs?plan=seed-9999".to_owned()),
        (
            "runs, replica (common)",
            "/runs?replica=r-seed-1".to_owned(),
        ),
        ("runs, replica (rare)", "/runs?replica=r-retired".to_owned()),
        (
            "runs, replica (oldest only)",
            "/runs?replica=r-legacy".to_owned(),
        ),
        ("runs, actor (common)", "/runs?actor=alice".to_owned()),
        ("runs, actor (rare)", "/runs?actor=ops-oncall".to_owned()),
        ("runs, error text", "/runs?error=deadlock".to_owned()),
        ("runs, since 1h", "/runs?since=1h".to_owned()),
        (
            "runs, 2 h window 12 h ago",
            "/runs?since=14h&until=12h".to_owned(),
        ),
        // Before a bulk action: the page counts what it would change (here
        // every FAILED run, about 10,000 of them).
        (
            "runs, Retry all confirm",
            "/runs?status=FAILED&confirm=retry".to_owned(),
        ),
        // A page from the middle of the history, as an Older link reaches.
        (
            "runs, older page",
            format!("/runs?before={}", seeded.runs / 2),
        ),
    ];
    println!(
        "{:<28} {:>9} {:>9} {:>9} {:>10}",
        "page", "p50", "p90", "max", "HTML"
    );
    for (name, path) in pages {
        let url = format!("{base}{path}");
        // Warm the connection pool and the database cache first.
        let mut bytes = 0;
        for _ in 0..3 {
            bytes = get(&client, &url).await?;
        }
        let mut times = Vec::with_capacity(requests);
        for _ in 0..requests {
            let started = Instant::now();
            get(&client, &url).await?;
            times.push(started.elapsed());
        }
        times.sort();
        println!(
            "{name:<28} {:>9} {:>9} {:>9} {:>8} KB",
            ms(times[times.len() / 2]),
            ms(times[times.len() * 9 / 10]),
            ms(*times.last().expect("requests > 0")),
            bytes / 1024
        );
    }
    Ok(())
}

impl Seeded {
    /// A run of the large plan, for the run page.
    async fn big_plan_first_run(&self, store: &dyn Store) -> anyhow::Result<i64> {
        let plan = store.plan_get(self.big_plan).await?;
        plan.tasks
            .iter()
            .find_map(|t| t.run_id)
            .context("the seeded plan has runs")
    }
}

pub(super) async fn seed_with_progress(url: &str, spec: SeedSpec) -> anyhow::Result<Seeded> {
    let total = spec.plans * spec.tasks;
    let mut progress = Progress::new(total as u64, "runs seeded");
    let seeded = seed(url, spec, |runs| {
        progress.update(runs as u64, total as u64, "")
    })
    .await;
    progress.finish();
    seeded
}

/// Serves the API and dashboard on 127.0.0.1 (a free port) with no
/// scheduler loops, so only page requests touch the database.
async fn serve_in_background(store: Arc<dyn Store>, settings: &Settings) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let info = ReplicaInfo {
        replica_id: "r-bench".into(),
        hostname: "bench".into(),
        labels: Vec::new(),
        version: crate::serve::VERSION.into(),
        started_at: Ts::now(),
    };
    store.replica_upsert(&info, Ts::now()).await?;
    // No scheduler runs here: the counters stay at zero.
    let app = crate::serve::router(store, info, Default::default(), settings, None)?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(format!("http://{address}"))
}

/// Fetches a page in full; returns its size. Anything but 200 is an error.
async fn get(client: &reqwest::Client, url: &str) -> anyhow::Result<usize> {
    let response = client.get(url).send().await?;
    let status = response.status();
    let body = response.bytes().await?;
    anyhow::ensure!(status.is_success(), "GET {url} answered {status}");
    Ok(body.len())
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}
