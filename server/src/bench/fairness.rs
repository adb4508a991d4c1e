//! `baton bench --fairness`: how much one person's flood of requests slows
//! another person's (docs/security.md, "Fair shares").
//!
//! A `baton serve` process (this binary, its own process so that neither
//! client shares its runtime) serves a scratch database seeded with a
//! finished history, with two users: alice and bob. Bob asks for a few
//! ordinary things one at a time — an API page of runs, the plans list,
//! the Plans page, `/readyz` — first with nobody else asking, then while
//! alice floods the server from many connections: once with searches
//! through every run's error text (the costliest read she may ask for),
//! once with reads of the plans list, which only the request turns bound.
//!
//! Alice's flood is a second process of this binary started under `nice`
//! (19 by default). On a machine of two cores a flooding client is
//! otherwise mostly a fight for the CPU between the client and the server,
//! which a flood from another machine is not; the niced process stands in
//! for that machine, and what is left is how the server shares itself.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::io::AsyncBufReadExt;

use super::serve_process::ServeProcess;
use crate::auth::{new_token, token_hash};
use crate::bench::scratch::Scratch;
use crate::bench::seed::{SeedSpec, seed};
use crate::config::Settings;

/// The history the searches go through.
const HISTORY: SeedSpec = SeedSpec {
    plans: 2_000,
    tasks: 10,
    big_plan_tasks: 100,
};

/// Bob's requests, each timed alone, in turn.
const BOBS: [(&str, &str); 4] = [
    ("API: 50 DONE runs", "/api/v1/runs?status=DONE&limit=50"),
    ("API: 20 newest plans", "/api/v1/plans?limit=20"),
    ("page: Plans", "/plans"),
    ("/readyz", "/readyz"),
];

/// What alice floods with.
const FLOODS: [(&str, &str); 2] = [
    (
        "error-text searches",
        "/api/v1/runs?error=no-such-words&limit=50",
    ),
    // Not a search, so only the turns bound it.
    ("plans-list reads", "/api/v1/plans?limit=20"),
];

/// Knobs of `--fairness`.
pub struct Fairness {
    pub connections: usize,
    pub window: Duration,
    pub nice: i32,
}

pub async fn run(settings: &Settings, knobs: Fairness) -> anyhow::Result<()> {
    let scratch = Scratch::new(&settings.database.url.0).await?;
    let result = bench(settings, &scratch, &knobs).await;
    scratch.drop_database().await?;
    result
}

async fn bench(settings: &Settings, scratch: &Scratch, knobs: &Fairness) -> anyhow::Result<()> {
    // Migrated by opening, then closed: the server process owns it.
    drop(scratch.store().await?);
    let seeded = seed(&scratch.url, HISTORY, |_| {}).await?;
    let users = tempfile::tempdir()?;
    let (alice, bob) = (new_token()?, new_token()?);
    let users_file = users.path().join("users.yaml");
    std::fs::write(
        &users_file,
        format!(
            "users:\n  - name: alice\n    role: operator\n    token_hashes: [\"{}\"]\n  \
             - name: bob\n    role: operator\n    token_hashes: [\"{}\"]\n",
            token_hash(&alice).to_text(),
            token_hash(&bob).to_text()
        ),
    )?;
    let users_path = users_file.display().to_string();
    let postgres = scratch.url.starts_with("postgres");
    // On PostgreSQL a second replica: what alice's flood of the first
    // does to bob there is the database's share, not the replica's.
    let mut servers = Vec::new();
    for _ in 0..if postgres { 2 } else { 1 } {
        servers.push(ServeProcess::spawn_with(
            settings,
            &scratch.url,
            4,
            &[("BATON_USERS_FILE", users_path.as_str())],
        )?);
    }
    let bases: Vec<String> = servers.iter().map(|s| s.base.clone()).collect();
    let bobs_client = Client::new(&bases, &bob)?;
    bobs_client.ready().await?;
    let backend = if postgres { "PostgreSQL" } else { "SQLite" };
    println!(
        "baton bench --fairness: {backend}, {} runs; alice floods from {} connections at nice {}, \
         bob asks one request at a time; {} s per phase; {} request slots, {} requests and {} \
         search shares per user",
        seeded.runs,
        knobs.connections,
        knobs.nice,
        knobs.window.as_secs(),
        settings.request_slots,
        settings.requests_per_user,
        settings.search_shares_per_user
    );
    // Warm the pools and caches, then the idle figures.
    bobs_client.round(Duration::from_secs(1)).await?;
    let idle = bobs_client.round(knobs.window).await?;
    println!(
        "{:<22} {:<26} {:>16} {:>18} {:>7}",
        "alice floods", "bob asks", "idle p50/p95", "flooded p50/p95", "p50 ×"
    );
    for (flood_name, flood_path) in FLOODS {
        let flood = Flood::start(&bases[0], flood_path, &alice, knobs)?;
        // Let the flood reach its pace before bob's clock starts.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let flooded = bobs_client.round(knobs.window).await;
        let answers = flood.finish().await?;
        let flooded = flooded?;
        for (i, (before, during)) in idle.iter().zip(&flooded).enumerate() {
            let bobs_name = BOBS[i % BOBS.len()].0;
            let replica = i / BOBS.len();
            let asks = match (bases.len(), replica) {
                (1, _) => bobs_name.to_owned(),
                (_, 0) => format!("{bobs_name} @A"),
                _ => format!("{bobs_name} @B"),
            };
            println!(
                "{:<22} {:<26} {:>16} {:>18} {:>6.1}×{}",
                flood_name,
                asks,
                pair(before),
                pair(during),
                ms_of(percentile(during, 50.0)) / ms_of(percentile(before, 50.0)),
                failures(during)
            );
        }
        println!("  alice's answers: {answers}");
    }
    if bases.len() > 1 {
        println!("(@A: the replica alice floods; @B: another replica on the same database)");
    }
    drop(servers);
    Ok(())
}

/// One timed request: how long, and whether it was answered 2xx.
#[derive(Clone, Copy)]
struct Sample {
    took: Duration,
    ok: bool,
}

/// The bench's own percentile ([`super::percentile`]) of these samples.
fn percentile(samples: &[Sample], p: f64) -> Duration {
    let mut took: Vec<Duration> = samples.iter().map(|s| s.took).collect();
    took.sort();
    if took.is_empty() {
        return Duration::ZERO;
    }
    super::percentile(&took, p)
}

fn ms_of(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn pair(samples: &[Sample]) -> String {
    format!(
        "{:.1}/{:.1} ms",
        ms_of(percentile(samples, 50.0)),
        ms_of(percentile(samples, 95.0))
    )
}

fn failures(samples: &[Sample]) -> String {
    let failed = samples.iter().filter(|s| !s.ok).count();
    if failed == 0 {
        String::new()
    } else {
        format!("  ({failed} of {} not 2xx)", samples.len())
    }
}

/// Bob: one request at a time, with his own token, to each replica.
struct Client {
    http: reqwest::Client,
    bases: Vec<String>,
    auth: String,
}

impl Client {
    fn new(bases: &[String], token: &str) -> anyhow::Result<Self> {
        Ok(Client {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()?,
            bases: bases.to_vec(),
            auth: format!("Bearer {token}"),
        })
    }

    /// Waits (up to 30 s) until every server answers `/readyz` with 200.
    async fn ready(&self) -> anyhow::Result<()> {
        let started = Instant::now();
        for base in &self.bases {
            loop {
                let answer = self.http.get(format!("{base}/readyz")).send().await;
                if answer.is_ok_and(|a| a.status().is_success()) {
                    break;
                }
                if started.elapsed() > Duration::from_secs(30) {
                    bail!("a baton serve process was not ready within 30 s");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    /// Each of bob's requests to each replica in turn for `window`; the
    /// samples of each, replica by replica.
    async fn round(&self, window: Duration) -> anyhow::Result<Vec<Vec<Sample>>> {
        let asks: Vec<String> = self
            .bases
            .iter()
            .flat_map(|base| BOBS.iter().map(move |(_, path)| format!("{base}{path}")))
            .collect();
        let mut samples = vec![Vec::new(); asks.len()];
        let started = Instant::now();
        while started.elapsed() < window {
            for (i, url) in asks.iter().enumerate() {
                let sent = Instant::now();
                let answer = self
                    .http
                    .get(url)
                    .header(reqwest::header::AUTHORIZATION, &self.auth)
                    .send()
                    .await
                    .with_context(|| format!("bob's GET {url}"))?;
                let ok = answer.status().is_success();
                // The whole body: a page is done when it has arrived.
                answer.bytes().await?;
                samples[i].push(Sample {
                    took: sent.elapsed(),
                    ok,
                });
            }
        }
        Ok(samples)
    }
}

/// Alice's flood: a niced `baton bench --flood` process.
struct Flood {
    child: tokio::process::Child,
}

impl Flood {
    fn start(base: &str, path: &str, token: &str, knobs: &Fairness) -> anyhow::Result<Self> {
        // The flood lasts a little longer than bob's window after its
        // 1 s start, and is then stopped by its own clock.
        let seconds = knobs.window.as_secs() + 2;
        let child = tokio::process::Command::new("nice")
            .arg("-n")
            .arg(knobs.nice.to_string())
            .arg(std::env::current_exe()?)
            .args(["bench", "--flood"])
            .arg(format!("{base}{path}"))
            .arg("--fairness-connections")
            .arg(knobs.connections.to_string())
            .arg("--fairness-seconds")
            .arg(seconds.to_string())
            .env("BATON_TOKEN", token)
            .env("BATON_LOG", "error")
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting the flood process (`nice` must be on PATH)")?;
        Ok(Flood { child })
    }

    /// Waits for the flood to end; its summary line.
    async fn finish(mut self) -> anyhow::Result<String> {
        let stdout = self.child.stdout.take().context("the flood's stdout")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let mut last = String::new();
        while let Some(line) = lines.next_line().await? {
            last = line;
        }
        let status = self.child.wait().await?;
        anyhow::ensure!(status.success(), "the flood process failed: {status}");
        Ok(last)
    }
}

/// The flood process itself: `connections` clients asking for `url` as
/// fast as they are answered, for `seconds`; prints how it was answered.
pub async fn flood(url: &str, token: &str, connections: usize, seconds: u64) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(connections)
        .timeout(Duration::from_secs(30))
        .build()?;
    let counts: Arc<[AtomicU64; 4]> = Arc::new(Default::default());
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let auth = format!("Bearer {token}");
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let (http, counts, auth, url) =
            (http.clone(), counts.clone(), auth.clone(), url.to_owned());
        clients.spawn(async move {
            while Instant::now() < deadline {
                let slot = match http
                    .get(&url)
                    .header(reqwest::header::AUTHORIZATION, &auth)
                    .send()
                    .await
                {
                    Ok(answer) => {
                        let slot = match answer.status().as_u16() {
                            200..=299 => 0,
                            429 => 1,
                            _ => 2,
                        };
                        let _ = answer.bytes().await;
                        slot
                    }
                    Err(_) => 3,
                };
                counts[slot].fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    while clients.join_next().await.is_some() {}
    let [ok, refused, other, failed] = counts
        .as_ref()
        .each_ref()
        .map(|c| c.load(Ordering::Relaxed));
    println!(
        "{:.0} requests/s: {ok} × 2xx, {refused} × 429, {other} other, {failed} failed to send",
        (ok + refused + other + failed) as f64 / seconds as f64
    );
    Ok(())
}
