//! Property tests of everything a submitter controls (issue 19, item 5):
//! plan documents with absurd, hostile and random values in every field,
//! random bytes, command output, durations and times. None may panic or
//! hang; every accepted plan holds every stated bound; and no accepted
//! plan, whatever it holds, stops scheduling for the plans beside it, on
//! either backend.
//!
//! Cases per property: proptest's default (256), or `PROPTEST_CASES`; the
//! scheduling property runs a quarter as many (each is a few database
//! rounds). A longer search: `PROPTEST_CASES=20000 cargo test -p server
//! --test fuzz`.

mod common;

use std::time::Duration;

use baton::executor::LogSink;
use baton::executor::output::{MAX_LINE_BYTES, pump};
use baton::plan::{self, ExecutorSpec, NewPlan, limits};
use baton::store::Store;
use chrono::Datelike;
use common::{Kind, TestDb};
use domain::gates::NodeLabels;
use domain::time::Ts;
use proptest::prelude::*;
use serde_json::{Value, json};

/// Text an attacker or a careless operator might put anywhere.
fn text() -> impl Strategy<Value = String> {
    // Mostly valid, so that plenty of plans pass validation and reach the
    // scheduling property; the rest is every kind of wrong.
    prop_oneof![
        150 => "[a-z0-9/._-]{1,12}",
        1 => any::<String>(),
        1 => "\\PC{0,40}",
        1 => Just(String::new()),
        1 => Just(" ".into()),
        1 => Just("x".repeat(limits::MAX_NAME_CHARS + 1)),
        1 => Just("a\u{0}b".into()),
        1 => Just("line\nbreak".into()),
        1 => Just("x</title><script>alert(1)</script>".into()),
        1 => Just("../../etc/passwd".into()),
        1 => Just("é✓🚀".into()),
    ]
}

/// Durations as written, sensible and not.
fn duration() -> impl Strategy<Value = String> {
    let unit = prop::sample::select(vec!["ns", "us", "ms", "s", "m", "h", "d", "w", "M", "y"]);
    prop_oneof![
        30 => (1u64..60, prop::sample::select(vec!["s", "m"])).prop_map(|(n, u)| format!("{n}{u}")),
        2 => (0u64..5000, unit.clone()).prop_map(|(n, u)| format!("{n}{u}")),
        1 => (any::<u64>(), unit).prop_map(|(n, u)| format!("{n}{u}")),
        1 => Just("0s".into()),
        1 => Just("1000000y".into()),
        1 => Just("never".into()),
        1 => Just("1h 30m".into()),
        1 => text(),
    ]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        20 => (-3i64..200).prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => Just(json!(u64::MAX)),
        1 => Just(json!(1.5)),
        1 => Just(json!("7")),
        1 => Just(Value::Null),
    ]
}

fn run_at() -> impl Strategy<Value = String> {
    prop_oneof![
        20 => (1970i32..2200, 1u32..13, 1u32..29)
            .prop_map(|(y, m, d)| format!("{y:04}-{m:02}-{d:02}T00:00:00Z")),
        1 => Just("0000-01-01T00:00:00Z".into()),
        1 => Just("+262143-12-31T23:59:59Z".into()),
        1 => Just("9999-12-31T23:59:59Z".into()),
        1 => text(),
    ]
}

fn executor() -> impl Strategy<Value = (String, Value)> {
    prop_oneof![
        6 => duration().prop_map(|d| ("sleep".to_owned(), json!(d))),
        3 => (
            prop_oneof![9 => prop::collection::vec(text(), 1..4), 1 => prop::collection::vec(text(), 0..1)],
            prop::collection::btree_map(text(), text(), 0..3),
            prop::option::weighted(0.2, text())
        )
            .prop_map(|(argv, env, cwd)| (
                "command".to_owned(),
                json!({"argv": argv, "env": env, "cwd": cwd})
            )),
        1 => (
            prop_oneof![4 => Just("http://127.0.0.1:9/x".to_owned()), 1 => text()],
            prop::option::weighted(0.2, text()),
            prop::collection::btree_map(text(), text(), 0..3),
            prop::option::weighted(0.2, text()),
            prop_oneof![9 => prop::collection::vec(100u16..600, 0..3), 1 => prop::collection::vec(any::<u16>(), 0..3)]
        )
            .prop_map(|(url, method, headers, body, expect)| (
                "http".to_owned(),
                json!({"url": url, "method": method, "headers": headers, "body": body, "expect": expect})
            )),
    ]
}

/// Sets `key` to `value` when given.
fn put(object: &mut serde_json::Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(value) = value {
        object.insert(key.to_owned(), value);
    }
}

fn task() -> impl Strategy<Value = Value> {
    (
        (text(), text(), prop::option::weighted(0.2, any::<bool>())),
        (
            prop::option::weighted(0.2, prop_oneof![text().prop_map(Value::from), number()]),
            prop::option::weighted(0.2, run_at()),
            prop::option::weighted(0.2, text()),
        ),
        (
            prop::option::weighted(0.2, duration()),
            prop::option::weighted(0.2, duration()),
            prop::option::weighted(0.2, duration()),
            prop::option::weighted(0.2, duration()),
        ),
        prop::option::weighted(
            0.2,
            prop_oneof![20 => (1i64..=100).prop_map(Value::from), 1 => number()],
        ),
        executor(),
    )
        .prop_map(
            |(
                (name, target, exclusive),
                (version, at, node),
                (timeout, hi, ht, ra),
                attempts,
                (kind, spec),
            )| {
                let mut t = serde_json::Map::new();
                t.insert("name".into(), name.into());
                t.insert("target".into(), target.into());
                put(&mut t, "exclusive", exclusive.map(Value::from));
                put(&mut t, "version", version);
                put(&mut t, "run_at", at.map(Value::from));
                put(&mut t, "node", node.map(Value::from));
                put(&mut t, "timeout", timeout.map(Value::from));
                put(&mut t, "heartbeat_interval", hi.map(Value::from));
                put(&mut t, "heartbeat_timeout", ht.map(Value::from));
                // Only where it applies: without a pin it is always refused
                // (a unit test covers that), and would hide the rest.
                let pinned = t.contains_key("node");
                put(
                    &mut t,
                    "reassign_after",
                    ra.filter(|_| pinned).map(Value::from),
                );
                put(&mut t, "max_attempts", attempts);
                t.insert(kind, spec);
                Value::Object(t)
            },
        )
}

fn plan_document() -> impl Strategy<Value = Value> {
    (
        text(),
        prop::option::weighted(0.2, text()),
        prop::option::weighted(0.2, number()),
        prop::option::weighted(0.2, any::<bool>()),
        prop::collection::vec(task(), 1..6),
    )
        .prop_map(|(name, description, limit, start, tasks)| {
            let mut p = serde_json::Map::new();
            p.insert("name".into(), name.into());
            put(&mut p, "description", description.map(Value::from));
            put(&mut p, "parallel_limit", limit);
            put(&mut p, "start", start.map(Value::from));
            p.insert("tasks".into(), Value::Array(tasks));
            Value::Object(p)
        })
}

/// Every bound of `plan::limits` holds for an accepted plan.
fn assert_within_bounds(plan: &NewPlan) {
    let name_ok = |s: &str| {
        !s.is_empty()
            && s.chars().count() <= limits::MAX_NAME_CHARS
            && !s.chars().any(char::is_control)
    };
    assert!(name_ok(&plan.name), "{:?}", plan.name);
    assert!(!plan.description.contains('\0'));
    assert!((1..=limits::MAX_TASKS).contains(&plan.tasks.len()));
    if let Some(limit) = plan.parallel_limit {
        assert!((1..=limits::MAX_PARALLEL_LIMIT).contains(&limit));
    }
    let within = |d: Duration, b: limits::DurationBounds| d >= b.min && d <= b.max;
    for t in &plan.tasks {
        assert!(name_ok(&t.name) && name_ok(&t.target), "{t:?}");
        assert!(t.version.as_deref().is_none_or(name_ok));
        assert!(t.node.as_deref().is_none_or(name_ok));
        assert!(within(t.timeout, limits::TIMEOUT), "{t:?}");
        assert!((1..=limits::MAX_ATTEMPTS).contains(&t.max_attempts));
        assert!(
            t.heartbeat_interval
                .is_none_or(|d| within(d, limits::HEARTBEAT_INTERVAL))
        );
        assert!(
            t.heartbeat_timeout
                .is_none_or(|d| within(d, limits::HEARTBEAT_TIMEOUT))
        );
        assert!(
            t.reassign_after
                .is_none_or(|d| within(d, limits::REASSIGN_AFTER))
        );
        if let Some(at) = t.run_at {
            assert!((limits::RUN_AT_YEARS.0..=limits::RUN_AT_YEARS.1).contains(&at.year()));
        }
        match &t.executor {
            ExecutorSpec::Sleep { duration } => assert!(within(*duration, limits::SLEEP)),
            ExecutorSpec::Command(c) => {
                assert!(!c.argv.is_empty() && c.argv.len() <= limits::MAX_ARGV);
                assert!(
                    c.argv
                        .iter()
                        .chain(c.env.keys())
                        .chain(c.env.values())
                        .all(|s| !s.contains('\0'))
                );
            }
            ExecutorSpec::Http(h) => {
                assert!(h.url.len() <= limits::MAX_URL_BYTES && !h.url.contains('\0'));
            }
        }
    }
}

proptest! {
    #[test]
    fn the_parser_never_panics_and_accepted_plans_hold_every_bound(doc in plan_document()) {
        let bytes = serde_json::to_vec(&doc).unwrap();
        if let Ok(plan) = plan::parse_json(&bytes) {
            assert_within_bounds(&plan);
        }
        // The same document as YAML takes the same path after parsing.
        let _ = plan::parse_text(&serde_json::to_string(&doc).unwrap());
    }

    #[test]
    fn random_bytes_never_panic_the_parsers(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let _ = plan::parse_json(&bytes);
        let _ = plan::parse_text(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn time_arithmetic_never_panics(secs in any::<u64>(), nanos in 0u32..1_000_000_000, micros in any::<i64>()) {
        let d = Duration::new(secs, nanos);
        let at = Ts::from_micros(micros);
        let _ = (at.plus(d), at.minus(d), Ts::now().plus(d).clock());
        let _ = plan::limits::TIMEOUT.check("timeout", d);
    }

    #[test]
    fn any_output_is_stored_in_bounded_nul_free_lines(
        chunks in prop::collection::vec(
            prop_oneof![
                prop::collection::vec(any::<u8>(), 0..512),
                (any::<u8>(), 0usize..(3 * MAX_LINE_BYTES)).prop_map(|(b, n)| vec![b; n]),
            ],
            0..8,
        )
    ) {
        let bytes: Vec<u8> = chunks.concat();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let lines = runtime.block_on(async {
            let (log, mut rx) = LogSink::new(baton::executor::output::DEFAULT_MAX_RUN_LOG_BYTES);
            pump(Some(&bytes[..]), "stdout", log, None).await;
            let mut lines = Vec::new();
            while let Ok(line) = rx.try_recv() {
                lines.push(line.line);
            }
            lines
        });
        for line in lines {
            prop_assert!(line.len() <= MAX_LINE_BYTES + 64, "{} bytes", line.len());
            prop_assert!(!line.contains('\0'));
        }
    }
}

/// Deeply nested documents end in an error, not a stack overflow.
#[test]
fn deep_nesting_is_refused_not_a_crash() {
    for depth in [1_000, 100_000] {
        let json = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(plan::parse_json(json.as_bytes()).is_err());
        let yaml = format!("name: {}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(plan::parse_text(&yaml).is_err());
    }
}

fn scheduling_cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse::<u32>().ok())
        .map_or(64, |n| (n / 4).max(1))
}

/// Whatever an accepted plan holds, storing it and running the scheduling
/// rounds over it (promote, claim, finish) succeeds, and a plain plan
/// submitted beside it is still promoted and claimed.
fn accepted_plans_never_stop_scheduling(kind: Kind) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(TestDb::new(kind));
    let store = runtime.block_on(db.store());
    let cases = scheduling_cases();
    let config = ProptestConfig {
        cases,
        ..ProptestConfig::default()
    };
    let accepted = std::sync::atomic::AtomicU32::new(0);
    proptest!(config, |(doc in plan_document())| {
        let Ok(plan) = plan::parse_json(&serde_json::to_vec(&doc).unwrap()) else {
            return Ok(());
        };
        accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        runtime.block_on(schedule_beside(store.as_ref(), &plan));
    });
    let accepted = accepted.into_inner();
    // A guard against a generator that stopped making valid plans, not a
    // rate to hold: 18–24 of 64 were valid in eight runs, and CI once saw
    // 10, under the one in six this asked for before.
    assert!(
        accepted * 16 >= cases,
        "only {accepted} of {cases} generated plans were valid: the property says little"
    );
}

async fn schedule_beside(store: &dyn Store, plan: &NewPlan) {
    let now = Ts::now();
    store
        .plan_insert(plan, "fuzz".into(), now)
        .await
        .expect("an accepted plan is stored");
    let canary = common::plan(json!({"name": "canary", "tasks": [
        {"name": "c", "target": format!("canary/{}", fastrand::u64(..)), "sleep": "0s"}
    ]}));
    let canary = store
        .plan_insert(&canary, "fuzz".into(), now)
        .await
        .unwrap();
    let nodes = NodeLabels::default();
    store
        .run_promote_round(&nodes, None, Ts::now())
        .await
        .expect("the promoter's round");
    let claim = common::store::claim("r-fuzz", &[], 1_000);
    let claimed = store
        .run_claim_many(&claim, Ts::now())
        .await
        .expect("the claim");
    assert!(
        claimed.iter().any(|r| r.plan_id == canary),
        "the plan beside it was promoted and claimed"
    );
    let done: Vec<_> = claimed.iter().map(|r| common::store::done(r.id)).collect();
    store
        .run_finish_many("r-fuzz", &done, Ts::now())
        .await
        .expect("the finish");
    store
        .run_sweep(Duration::from_secs(10), None, Ts::now())
        .await
        .expect("the sweep");
}

#[test]
fn accepted_plans_never_stop_scheduling_on_sqlite() {
    accepted_plans_never_stop_scheduling(Kind::Sqlite);
}

#[test]
fn accepted_plans_never_stop_scheduling_on_postgres() {
    accepted_plans_never_stop_scheduling(Kind::Postgres);
}
