//! `baton bench --graph`: what dependencies cost as plans grow. A chain
//! (each task waits for the one before) and a fan-in (one task waits for
//! all others), each at two sizes ten times apart, so the figures show
//! whether the cost per task stays flat (linear) or grows with the plan
//! (quadratic). Each plan is submitted before the replicas start (the
//! submit is timed alone), then run to DONE: timed from the replicas'
//! start to the last run's finish as stored, with the plan looked at only
//! once a second (reading a 10,000-task plan every millisecond, as this
//! bench first did, took a core from the runs and tripled a chain's time
//! per task on PostgreSQL).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{InProcess, Replicas, Target, ms, wait_done_polling};
use crate::bench::scratch::Scratch;
use crate::loops::SchedulerConfig;
use domain::time::Ts;

/// `n` tasks, each depending on the one before.
fn chain(n: usize) -> Value {
    let tasks: Vec<Value> = (0..n)
        .map(|i| {
            let mut task =
                json!({"name": format!("t{i}"), "target": format!("chain/{i}"), "sleep": "0s"});
            if i > 0 {
                task["depends_on"] = json!([format!("t{}", i - 1)]);
            }
            task
        })
        .collect();
    json!({"name": format!("bench-chain-{n}"), "tasks": tasks})
}

/// `n` independent tasks and one that depends on all of them.
fn fan_in(n: usize) -> Value {
    let mut tasks: Vec<Value> = (0..n)
        .map(|i| json!({"name": format!("t{i}"), "target": format!("fan/{i}"), "sleep": "0s"}))
        .collect();
    let all: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
    tasks.push(json!({"name": "last", "target": "fan/last", "sleep": "0s", "depends_on": all}));
    json!({"name": format!("bench-fan-in-{n}"), "tasks": tasks})
}

pub async fn run(url: &str, replicas: usize, config: &SchedulerConfig) -> anyhow::Result<()> {
    println!(
        "graph: each plan submitted with no replica running, then run to DONE by {replicas} in-process replica(s)"
    );
    let shapes = [
        ("chain", 1_000, chain(1_000)),
        ("chain", 10_000, chain(10_000)),
        ("fan-in", 500, fan_in(500)),
        ("fan-in", 5_000, fan_in(5_000)),
    ];
    for (shape, n, plan) in shapes {
        let scratch = Scratch::new(url).await?;
        let stores = scratch.stores(replicas).await?;
        let target = InProcess(stores[0].clone());
        let submitting = Instant::now();
        let id = target.submit(&plan).await?;
        let submit = submitting.elapsed();
        let started = Ts::now();
        let running = Replicas::start(&stores, config).await?;
        let result = wait_done_polling(
            &target,
            id,
            Duration::from_secs(1800),
            Duration::from_secs(1),
        )
        .await;
        running.stop().await;
        scratch.drop_database().await?;
        let view = result?;
        let last = view
            .tasks
            .iter()
            .filter_map(|t| t.finished_at)
            .max()
            .ok_or_else(|| anyhow::anyhow!("plan {id} is DONE with no finished run"))?;
        let took = (last - started.0).to_std().unwrap_or_default();
        let tasks = view.tasks.len();
        println!(
            "graph: {shape} of {n:>6}: submit {} ({:.1} µs/task), run to DONE {} ({:.3} ms/task, {:.0} runs/s)",
            ms(submit),
            submit.as_secs_f64() * 1e6 / tasks as f64,
            ms(took),
            took.as_secs_f64() * 1e3 / tasks as f64,
            tasks as f64 / took.as_secs_f64()
        );
    }
    Ok(())
}
