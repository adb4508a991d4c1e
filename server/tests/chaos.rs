//! A randomized fault schedule against real processes (issue 19): three
//! `baton serve` replicas on one PostgreSQL database, each reaching it
//! through a TCP proxy the harness controls, run a stream of plans that
//! exercise the gates (versions, exclusive and shared targets, plan limits,
//! `run_at`, pins, retries) with commands that append every execution's
//! span to a file outside the database. Meanwhile a seeded schedule
//! injects faults, one replica at a time: SIGKILL and a restart, SIGSTOP
//! for longer than `stale_after`, and a network partition (the proxy stops
//! relaying). Then everything heals, the system settles, and the history
//! is checked:
//!
//! - SPEC §10 invariants 1–3, replayed from the event history of every run;
//! - no two executions of one task overlap in time (from the file);
//! - nothing lost or stuck: every task ends DONE or FAILED (attempts spent),
//!   nothing is left RUNNING.
//!
//! `CHAOS_SEED` fixes the schedule (printed on every run and in any
//! failure); `CHAOS_DURATION` sets how long faults are injected (default
//! 30 s per schedule; the suite runs a fixed seed and a random one).
//! A long soak: `CHAOS_DURATION=30m cargo test -p server --test chaos --
//! --nocapture random`.

mod common;

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use app::model::{EventView, PlanStatus, RunStatus, TaskStatus};
use baton::store::{Store, version};
use common::process::{Baton, Options};
use common::proxy::{Proxy, upstream_of};
use common::{Kind, TestDb, invariants};
use serde_json::{Value, json};

const REPLICAS: usize = 3;
const STALE_AFTER: Duration = Duration::from_secs(1);

/// Replica 0 carries the label pinned tasks ask for; the others take
/// pinned work once it has waited `reassign_after` for replica 0.
fn options(slot: usize) -> Options {
    let options = Options::default()
        .env("BATON_HEARTBEAT_INTERVAL", "200ms")
        .env("BATON_STALE_AFTER", "1s")
        .env("BATON_SWEEP_INTERVAL", "200ms")
        .env("BATON_LEADER_LEASE", "1s")
        .env("BATON_POLL_INTERVAL", "100ms");
    if slot == 0 {
        options.label("pinned")
    } else {
        options
    }
}

#[derive(Default)]
struct Faults {
    kill: usize,
    stop: usize,
    partition: usize,
    /// What happened when, for the report of a violation.
    log: Vec<String>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} SIGKILL, {} SIGSTOP, {} partitions",
            self.kill, self.stop, self.partition
        )
    }
}

/// One replica: its process (absent while killed) behind its own proxy.
struct Slot {
    baton: Option<Baton>,
    proxy: Proxy,
    url: String,
    index: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_fixed_seed() {
    chaos(seed_or(42)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_random_seed() {
    chaos(seed_or(fastrand::u64(..))).await;
}

fn seed_or(default: u64) -> u64 {
    std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn duration() -> Duration {
    std::env::var("CHAOS_DURATION")
        .ok()
        .and_then(|d| humantime::parse_duration(&d).ok())
        .unwrap_or(Duration::from_secs(30))
}

/// The two schedules share the machine's two cores badly: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn chaos(seed: u64) {
    let _turn = ONE_AT_A_TIME.lock().await;
    eprintln!("chaos: seed {seed} (CHAOS_SEED={seed} repeats this schedule)");
    let mut rng = fastrand::Rng::with_seed(seed);
    let db = TestDb::new(Kind::Postgres).await;
    let store = db.store().await;
    let upstream = upstream_of(db.url());
    let scratch = tempfile::tempdir().unwrap();
    let record = scratch.path().join("executions");
    let mut slots = Vec::new();
    for i in 0..REPLICAS {
        let proxy = Proxy::start(upstream).await;
        let url = proxy.route(db.url());
        let baton = Baton::start(&url, &options(i)).await;
        slots.push(Slot {
            baton: Some(baton),
            proxy,
            url,
            index: i,
        });
    }

    // Plans keep coming while faults come and go: two loops at once, the
    // submitter reading the replicas' current addresses.
    let bases = std::sync::Mutex::new(addresses(&slots));
    let mut faults = Faults::default();
    let mut plan_rng = fastrand::Rng::with_seed(rng.u64(..));
    let started = Instant::now();
    let submitting = async {
        let mut plans = Vec::new();
        while started.elapsed() < duration() {
            let plan = plan_of(&mut plan_rng, plans.len(), &record);
            let current = bases.lock().unwrap().clone();
            if let Some(id) = submit(&current, &plan).await {
                plans.push(id);
            }
            // Below what eight targets can drain under faults, so a long
            // soak does not end with a backlog it cannot settle.
            tokio::time::sleep(Duration::from_millis(plan_rng.u64(400..1200))).await;
        }
        plans
    };
    let injecting = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        while started.elapsed() < duration() {
            inject(&mut rng, &mut slots, &mut faults, started).await;
            *bases.lock().unwrap() = addresses(&slots);
            tokio::time::sleep(Duration::from_millis(rng.u64(500..2500))).await;
        }
    };
    let (plans, ()) = tokio::join!(submitting, injecting);

    // Heal: every replica running and connected, then let the work finish.
    for slot in &mut slots {
        slot.proxy.heal();
        if slot.baton.is_none() {
            slot.baton = Some(Baton::start(&slot.url, &options(slot.index)).await);
        }
    }
    let settled = settle(store.as_ref(), &plans, &faults).await;
    let summary = check(store.as_ref(), &plans, &record, &faults).await;
    eprintln!(
        "chaos: seed {seed}: {:?} in {:?}; {} plans, {} tasks, {} runs, {} executions; settled in {:?}; 0 violations",
        faults,
        duration(),
        plans.len(),
        summary.tasks,
        summary.runs,
        summary.executions,
        settled
    );
    assert!(
        faults.kill + faults.stop + faults.partition > 0,
        "the schedule injected nothing"
    );
}

/// A plan over a few shared targets, exercising every gate.
fn plan_of(rng: &mut fastrand::Rng, n: usize, record: &Path) -> Value {
    let tasks: Vec<Value> = (0..rng.usize(2..7))
        .map(|i| {
            let key = format!("p{n}-t{i}");
            let target = format!("db/{}", rng.usize(0..8));
            let ticks = rng.u32(2..15);
            // Some first attempts fail, so retries run too.
            let fail_first = rng.u8(0..5) == 0;
            let mut task = json!({
                "name": format!("t{i}"),
                "target": target,
                "exclusive": rng.bool(),
                "max_attempts": 6,
                "command": {
                    "argv": ["sh", "-c", "echo \"$KEY $BATON_RUN_ID $(date +%s%N)\" >> \"$RECORD\"; \
                        i=0; while [ $i -lt $TICKS ]; do sleep 0.1; \
                        echo \"$KEY $BATON_RUN_ID $(date +%s%N)\" >> \"$RECORD\"; i=$((i+1)); done; \
                        if [ \"$FAIL_FIRST\" = 1 ] && [ \"$BATON_ATTEMPT\" = 1 ]; then exit 3; fi"],
                    "env": {
                        "KEY": key, "RECORD": record.to_str().unwrap(),
                        "TICKS": ticks.to_string(), "FAIL_FIRST": if fail_first { "1" } else { "0" },
                    },
                },
            });
            match rng.u8(0..6) {
                0 => task["version"] = json!(format!("{n}.{i}")),
                1 => {
                    let at = chrono::Utc::now() + chrono::TimeDelta::milliseconds(rng.i64(0..3000));
                    task["run_at"] = json!(at.to_rfc3339());
                }
                2 => {
                    task["node"] = json!("pinned");
                    task["reassign_after"] = json!("2s");
                }
                _ => {}
            }
            task
        })
        .collect();
    let mut plan = json!({"name": format!("chaos-{n}"), "tasks": tasks});
    if rng.bool() {
        plan["parallel_limit"] = json!(rng.i64(1..4));
    }
    plan
}

fn addresses(slots: &[Slot]) -> Vec<String> {
    slots
        .iter()
        .filter_map(|s| s.baton.as_ref().map(|b| b.base.clone()))
        .collect()
}

/// Submits through any replica that answers (a fault may be on some).
async fn submit(bases: &[String], plan: &Value) -> Option<i64> {
    for base in bases {
        let answer = reqwest::Client::new()
            .post(format!("{base}/api/v1/plans"))
            .timeout(Duration::from_secs(2))
            .json(plan)
            .send()
            .await;
        if let Ok(r) = answer
            && r.status().as_u16() == 201
        {
            let view: Value = r.json().await.ok()?;
            return view["id"].as_i64();
        }
    }
    None
}

/// One fault on one replica, healed before returning, so that at most one
/// replica is faulty at a time and the others keep the work moving.
async fn inject(
    rng: &mut fastrand::Rng,
    slots: &mut [Slot],
    faults: &mut Faults,
    started: Instant,
) {
    let slot = &mut slots[rng.usize(0..REPLICAS)];
    let Some(baton) = slot.baton.as_mut() else {
        return;
    };
    let outage = STALE_AFTER * 2 + Duration::from_millis(rng.u64(0..1500));
    let kind = rng.u8(0..3);
    let wall = chrono::Utc::now().format("%H:%M:%S%.3f");
    faults.log.push(format!(
        "{wall} (+{:.1}s) {} {} for {outage:?}",
        started.elapsed().as_secs_f64(),
        ["SIGKILL", "SIGSTOP", "partition"][kind as usize],
        baton.replica_id
    ));
    match kind {
        0 => {
            faults.kill += 1;
            baton.sigkill().await;
            slot.baton = None;
            tokio::time::sleep(Duration::from_millis(rng.u64(0..1500))).await;
            slot.baton = Some(Baton::start(&slot.url, &options(slot.index)).await);
        }
        1 => {
            faults.stop += 1;
            baton.sigstop();
            tokio::time::sleep(outage).await;
            baton.sigcont();
        }
        _ => {
            faults.partition += 1;
            slot.proxy.blackhole();
            tokio::time::sleep(outage).await;
            slot.proxy.heal();
        }
    }
}

/// Waits until every plan has ended; how long that took. A plan still
/// open after three minutes plus a quarter of the schedule is reported
/// with each unfinished task and why it waits.
async fn settle(store: &dyn Store, plans: &[i64], faults: &Faults) -> Duration {
    let start = Instant::now();
    let limit = Duration::from_secs(180) + duration() / 4;
    let mut open: Vec<i64> = plans.to_vec();
    while !open.is_empty() {
        let mut still = Vec::new();
        for id in open {
            let ended = store
                .plan_get(id)
                .await
                .is_ok_and(|v| matches!(v.status, PlanStatus::Done | PlanStatus::Failed));
            if !ended {
                still.push(id);
            }
        }
        open = still;
        if open.is_empty() {
            break;
        }
        if start.elapsed() > limit {
            let mut report = format!(
                "{} plans still open {limit:?} after the faults stopped; the first:\n",
                open.len()
            );
            for id in open.iter().take(5) {
                let view = store.plan_get(*id).await.unwrap();
                let ended = |s: TaskStatus| {
                    matches!(
                        s,
                        TaskStatus::Done
                            | TaskStatus::Failed
                            | TaskStatus::Canceled
                            | TaskStatus::Skipped
                    )
                };
                for t in view.tasks.iter().filter(|t| !ended(t.status)) {
                    report.push_str(&format!(
                        "  plan {id} {} on {}: {} attempt {:?} run {:?} replica {:?}: {:?}\n",
                        t.name,
                        t.target,
                        t.status,
                        t.attempt,
                        t.run_id,
                        t.replica_id,
                        t.waiting_cause
                    ));
                }
            }
            let last: Vec<_> = faults.log.iter().rev().take(5).rev().cloned().collect();
            report.push_str(&format!("last faults:\n  {}\n", last.join("\n  ")));
            panic!("{report}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    start.elapsed()
}

struct Summary {
    tasks: usize,
    runs: usize,
    executions: usize,
}

struct Facts {
    plan_id: i64,
    task_id: i64,
    target: String,
    exclusive: bool,
    version: Option<String>,
    limit: Option<i64>,
}

async fn check(store: &dyn Store, plans: &[i64], record: &Path, faults: &Faults) -> Summary {
    // What each run is, from its task.
    let events = invariants::all_events(store).await;
    let mut by_task = HashMap::new();
    let mut tasks = 0;
    for id in plans {
        let view = store.plan_get(*id).await.unwrap();
        for task in &view.tasks {
            tasks += 1;
            assert!(
                matches!(task.status, TaskStatus::Done | TaskStatus::Failed),
                "nothing lost or stuck: plan {id} task {} is {} ({:?})",
                task.name,
                task.status,
                task.waiting_cause
            );
            by_task.insert(task.id, (view.id, task.clone(), view.parallel_limit));
        }
    }
    let run_ids: HashSet<i64> = events.iter().map(|e| e.run_id).collect();
    let mut facts: HashMap<i64, Facts> = HashMap::new();
    for run_id in &run_ids {
        let run = store.run_get(*run_id).await.unwrap();
        assert_ne!(run.status, RunStatus::Running, "run {run_id} left RUNNING");
        let Some((plan_id, task, limit)) = by_task.get(&run.task_id) else {
            continue;
        };
        facts.insert(
            *run_id,
            Facts {
                plan_id: *plan_id,
                task_id: task.id,
                target: task.target.clone(),
                exclusive: task.exclusive,
                version: task.version.clone(),
                limit: *limit,
            },
        );
    }
    replay(&events, &facts);
    let executions = match no_execution_overlaps(record) {
        Ok(n) => n,
        Err((why, runs)) => {
            let mut report = format!("{why}\nfaults:\n  {}\n", faults.log.join("\n  "));
            for run in runs {
                let view = store.run_get(run).await.unwrap();
                report.push_str(&format!(
                    "run {run} (attempt {}, replica {:?}): {:?}\n",
                    view.attempt, view.replica_id, view.error
                ));
                for e in view.events {
                    report.push_str(&format!(
                        "  {} {:?} -> {} by {} ({:?}) {:?}\n",
                        e.at.format("%H:%M:%S%.3f"),
                        e.from,
                        e.to,
                        e.actor,
                        e.replica_id,
                        e.detail
                    ));
                }
            }
            panic!("{report}");
        }
    };
    Summary {
        tasks,
        runs: facts.len(),
        executions,
    }
}

/// SPEC §10 invariants 1–3 over every run, retries included.
fn replay(events: &[EventView], facts: &HashMap<i64, Facts>) {
    let mut live: HashSet<i64> = HashSet::new();
    let mut active: HashSet<i64> = HashSet::new();
    for e in events {
        let Some(me) = facts.get(&e.run_id) else {
            continue;
        };
        match (e.from, e.to) {
            (None, RunStatus::Pending) => {
                live.insert(e.run_id);
            }
            (Some(RunStatus::Pending), RunStatus::Available) => {
                for other_id in &active {
                    let other = &facts[other_id];
                    assert!(
                        other.target != me.target || (!me.exclusive && !other.exclusive),
                        "invariant 1: run {} became AVAILABLE on {} beside active run {other_id} (event {})",
                        e.run_id,
                        me.target,
                        e.id
                    );
                }
                if let Some(limit) = me.limit {
                    let in_plan = active
                        .iter()
                        .filter(|id| facts[*id].plan_id == me.plan_id)
                        .count() as i64;
                    assert!(
                        in_plan < limit,
                        "invariant 2: plan {} had {in_plan} active runs (limit {limit}) at event {}",
                        me.plan_id,
                        e.id
                    );
                }
                if let Some(v) = &me.version {
                    for other_id in &live {
                        let other = &facts[other_id];
                        if other.target == me.target
                            && other.task_id != me.task_id
                            && let Some(ov) = &other.version
                        {
                            assert!(
                                version::compare(ov, v) != Ordering::Less,
                                "invariant 3: run {} (version {v}) promoted on {} while run {other_id} (version {ov}) was unfinished (event {})",
                                e.run_id,
                                me.target,
                                e.id
                            );
                        }
                    }
                }
                active.insert(e.run_id);
            }
            (_, to) if to.is_terminal() => {
                active.remove(&e.run_id);
                live.remove(&e.run_id);
            }
            (Some(RunStatus::Available | RunStatus::Running), RunStatus::Pending) => {
                active.remove(&e.run_id);
            }
            _ => {}
        }
    }
}

/// Invariant 4 for processes: per task, the spans (first to last line) of
/// its executions never overlap. How many executions there were, or what
/// overlapped.
fn no_execution_overlaps(record: &Path) -> Result<usize, (String, Vec<i64>)> {
    let text = std::fs::read_to_string(record).unwrap_or_default();
    let mut spans: BTreeMap<&str, BTreeMap<i64, (u128, u128)>> = BTreeMap::new();
    for line in text.lines() {
        let mut parts = line.split(' ');
        let (Some(key), Some(run), Some(at)) = (parts.next(), parts.next(), parts.next()) else {
            panic!("a torn line in the record: {line:?}");
        };
        let (run, at): (i64, u128) = (run.parse().unwrap(), at.parse().unwrap());
        let span = spans.entry(key).or_default().entry(run).or_insert((at, at));
        span.0 = span.0.min(at);
        span.1 = span.1.max(at);
    }
    let mut executions = 0;
    for (task, runs) in &spans {
        executions += runs.len();
        let mut ordered: Vec<_> = runs.iter().collect();
        ordered.sort_by_key(|(_, (first, _))| *first);
        for pair in ordered.windows(2) {
            let ((a, (_, a_last)), (b, (b_first, _))) = (pair[0], pair[1]);
            if a_last >= b_first {
                let at = |nanos: u128| {
                    chrono::DateTime::from_timestamp_nanos(nanos as i64).format("%H:%M:%S%.3f")
                };
                return Err((
                    format!(
                        "invariant 4: task {task}: run {a} still ran {} ms after run {b} started \
                         (run {a} last seen {}, run {b} first seen {})",
                        (a_last - b_first) / 1_000_000,
                        at(*a_last),
                        at(*b_first)
                    ),
                    vec![*a, *b],
                ));
            }
        }
    }
    Ok(executions)
}
