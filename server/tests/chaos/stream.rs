//! The plans a chaos schedule submits while faults come and go: ordinary
//! plans over a few shared targets that exercise every gate, hostile plans
//! at the edges of what validation accepts (they must run like any other
//! and never stop scheduling), and plans that must be refused (422,
//! nothing stored). Every submit carries an Idempotency-Key and is retried
//! with it until some replica answers, so a lost answer never leaves a
//! plan the harness does not know of.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};

/// What the harness expects of a plan it submitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Every task ends DONE or FAILED, its webhook phase notified once.
    Ends,
    /// A task due in the year 9999: PENDING with its time as the cause.
    WaitsForever,
}

#[derive(Debug)]
pub struct Submitted {
    pub id: i64,
    pub expect: Expect,
}

/// Counts of what was submitted and how it was answered.
#[derive(Default, Debug)]
pub struct Submits {
    pub accepted: Vec<Submitted>,
    pub hostile: usize,
    /// Plans large and plain enough to be admitted ([`wide`]).
    pub wide: usize,
    pub refused: usize,
    /// Submits no replica answered while faults came (a lone replica
    /// down, or every try timed out); each is sent again with its key
    /// once all is healed, and counted here.
    pub unanswered: usize,
}

impl Submits {
    /// Files submit `n`'s answer under what was expected of it; an answer
    /// that contradicts the expectation is a violation.
    pub fn record(&mut self, n: usize, plan: &Value, expect: Option<Expect>, answer: (u16, Value)) {
        match (answer, expect) {
            ((201 | 200, view), Some(expect)) => {
                if plan["name"].as_str().is_some_and(|name| name.contains('<')) {
                    self.hostile += 1;
                }
                if plan["name"]
                    .as_str()
                    .is_some_and(|name| name.ends_with(" wide"))
                {
                    self.wide += 1;
                }
                let id = view["id"].as_i64().expect("a plan id");
                self.accepted.push(Submitted { id, expect });
            }
            ((422, _), None) => self.refused += 1,
            ((status, body), expect) => {
                panic!("submit {n} (expected {expect:?}) answered {status}: {body}\nplan: {plan}")
            }
        }
    }
}

/// The next plan of the stream and what it should come to; `None` for a
/// plan that must be refused.
pub fn next_plan(
    rng: &mut fastrand::Rng,
    n: usize,
    record: &Path,
    hook: &str,
) -> (Value, Option<Expect>) {
    match rng.u8(0..20) {
        0 => (refused(rng, n), None),
        1 => (hostile(rng, n, record, hook), Some(Expect::Ends)),
        2 if rng.u8(0..4) == 0 => (far_future(n, hook), Some(Expect::WaitsForever)),
        3 if rng.u8(0..2) == 0 => (wide(rng, n, record, hook), Some(Expect::Ends)),
        _ => (ordinary(rng, n, record, hook), Some(Expect::Ends)),
    }
}

/// A command that appends its span to `record` (start, a line every
/// 100 ms, end, and `exit0` when it is about to exit 0) under the task's
/// key, and fails its first attempt when asked: how executions are seen
/// outside the database. Its output
/// starts and ends with a line naming the key: a DONE run's log must
/// hold both (invariant 8).
fn recorded_command(rng: &mut fastrand::Rng, key: &str, record: &Path, extra: &str) -> Value {
    let ticks = rng.u32(2..15);
    let fail_first = rng.u8(0..5) == 0;
    json!({
        "argv": ["sh", "-c", format!("echo \"started $KEY\"; echo \"$KEY $BATON_RUN_ID $(date +%s%N)\" >> \"$RECORD\"; \
            i=0; while [ $i -lt $TICKS ]; do sleep 0.1; \
            echo \"$KEY $BATON_RUN_ID $(date +%s%N)\" >> \"$RECORD\"; i=$((i+1)); done; {extra} \
            echo \"ended $KEY\"; if [ \"$FAIL_FIRST\" = 1 ] && [ \"$BATON_ATTEMPT\" = 1 ]; then exit 3; fi; \
            echo \"$KEY $BATON_RUN_ID $(date +%s%N) exit0\" >> \"$RECORD\"")],
        "env": {
            "KEY": key, "RECORD": record.to_str().unwrap(),
            "TICKS": ticks.to_string(), "FAIL_FIRST": if fail_first { "1" } else { "0" },
        },
    })
}

fn webhooks(hook: &str) -> Value {
    json!([{"url": format!("{hook}/sometimes"), "secret": "chaos"}])
}

/// The one target with a capacity (2), set before the first plan.
pub const CAPPED_TARGET: &str = "db/0";

/// A plan over a few shared targets, exercising every gate.
fn ordinary(rng: &mut fastrand::Rng, n: usize, record: &Path, hook: &str) -> Value {
    let tasks: Vec<Value> = (0..rng.usize(2..7))
        .map(|i| {
            let key = format!("p{n}-t{i}");
            let mut task = json!({
                "name": format!("t{i}"),
                "target": format!("db/{}", rng.usize(0..8)),
                "exclusive": rng.bool(),
                "max_attempts": 6,
                "command": recorded_command(rng, &key, record, ""),
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
                // Gate 6: wait for an earlier task of the plan.
                3 if i > 0 => task["depends_on"] = json!([format!("t{}", rng.usize(0..i))]),
                _ => {}
            }
            task
        })
        .collect();
    let mut plan =
        json!({"name": format!("chaos-{n}"), "tasks": tasks, "webhooks": webhooks(hook)});
    if rng.bool() {
        plan["parallel_limit"] = json!(rng.i64(1..4));
    }
    plan
}

/// A plan large and plain enough for its submit to admit its runs
/// (docs/design.md, "Admission"): shared tasks, half on targets of their
/// own (admitted unless the submit misses the promotion lock), half on
/// the shared targets, where a live exclusive run or the capacity keeps
/// them PENDING for the round.
fn wide(rng: &mut fastrand::Rng, n: usize, record: &Path, hook: &str) -> Value {
    let tasks: Vec<Value> = (0..baton::plan::MIN_ADMITTED_RUNS)
        .map(|i| {
            let key = format!("p{n}-t{i}");
            let target = match i % 2 {
                0 => format!("wide/{n}/{i}"),
                _ => format!("db/{}", rng.usize(0..8)),
            };
            json!({
                "name": format!("t{i}"),
                "target": target,
                "exclusive": false,
                "max_attempts": 6,
                "command": recorded_command(rng, &key, record, ""),
            })
        })
        .collect();
    json!({"name": format!("chaos-{n} wide"), "tasks": tasks, "webhooks": webhooks(hook)})
}

/// A plan at the edges validation accepts: markup and odd characters in
/// names, the longest durations, a pin that never reassigns, the largest
/// limits, and a command that floods its output with a 1 MB line and a
/// NUL byte. It must run like any other.
fn hostile(rng: &mut fastrand::Rng, n: usize, record: &Path, hook: &str) -> Value {
    let flood = "head -c 1048576 /dev/zero | tr '\\0' x; printf '\\0 after a NUL\\n';";
    let tasks: Vec<Value> = (0..rng.usize(1..4))
        .map(|i| {
            let key = format!("p{n}-t{i}");
            json!({
                "name": format!("t{i}</title><script>alert({n})</script> ✓ e\u{301} 🚀"),
                "target": format!("db/{}", rng.usize(0..8)),
                "exclusive": rng.bool(),
                "version": format!("{n}.{i}"),
                "timeout": "30d",
                "heartbeat_timeout": "1d",
                "max_attempts": 100,
                "node": if i == 0 { json!("pinned") } else { Value::Null },
                "reassign_after": if i == 0 { json!("never") } else { Value::Null },
                "command": recorded_command(rng, &key, record, flood),
            })
        })
        .collect();
    json!({
        "name": format!("chaos-{n} \"'<img src=x onerror=alert(1)>"),
        "description": "é".repeat(4_000),
        "parallel_limit": 1_000_000,
        "tasks": tasks,
        "webhooks": webhooks(hook),
    })
}

/// A plan due when no test will see it: it must wait, explained, and
/// never be claimed.
fn far_future(n: usize, hook: &str) -> Value {
    json!({
        "name": format!("chaos-{n} far"),
        "tasks": [{"name": "later", "target": "db/far", "run_at": "9999-12-31T23:59:59Z",
            "command": {"argv": ["false"]}}],
        "webhooks": webhooks(hook),
    })
}

/// A plan validation must refuse: absurd durations and times, NUL bytes,
/// a target that looks like another (a direction override), a spinning
/// heartbeat, an empty plan.
fn refused(rng: &mut fastrand::Rng, n: usize) -> Value {
    let task = |extra: Value| {
        let mut task = json!({"name": "t", "target": "db/0", "command": {"argv": ["true"]}});
        for (k, v) in extra.as_object().unwrap() {
            task[k] = v.clone();
        }
        task
    };
    let tasks = match rng.u8(0..8) {
        0 => json!([task(json!({"timeout": "1000000y"}))]),
        1 => json!([task(json!({"heartbeat_timeout": "1000000y"}))]),
        2 => json!([task(json!({"node": "x", "reassign_after": "1000000y"}))]),
        3 => json!([task(json!({"heartbeat_interval": "0s"}))]),
        4 => json!([task(json!({"name": "nul\u{0}name"}))]),
        5 => json!([task(json!({"run_at": "+10000-01-01T00:00:00Z"}))]),
        6 => json!([task(json!({"target": "db/\u{202e}0"}))]),
        _ => json!([]),
    };
    json!({"name": format!("chaos-{n} refused"), "tasks": tasks})
}

/// Submits `plan` under `key` through the replicas that are up (read
/// afresh each round: a restarted replica listens on a new port) until
/// one answers: the status and body. A lost answer is retried with the
/// same key, so the plan is created at most once; the first answer to a
/// retry whose original did get through is 200 with the same plan.
pub async fn submit(bases: &Mutex<Vec<String>>, plan: &Value, key: &str) -> Option<(u16, Value)> {
    let http = reqwest::Client::new();
    for round in 0..10 {
        let current = bases.lock().unwrap().clone();
        for base in current {
            let answer = http
                .post(format!("{base}/api/v1/plans"))
                .timeout(Duration::from_secs(2))
                .header("Idempotency-Key", key)
                .json(plan)
                .send()
                .await;
            if let Ok(r) = answer {
                let status = r.status().as_u16();
                if status >= 500 {
                    continue;
                }
                let body = r.json().await.unwrap_or(Value::Null);
                return Some((status, body));
            }
        }
        tokio::time::sleep(Duration::from_millis(200 * (round + 1))).await;
    }
    None
}
