//! The runs search on SQLite and PostgreSQL: every filter, alone and
//! combined, returns exactly the runs a plain reading of the history
//! says, newest first, paged without a gap or a repeat — both for runs
//! the probe finds among the newest ids and for old ones it leaves to
//! the indexes (a plan of 4,200 runs lies between the two).

use std::collections::BTreeSet;
use std::time::Duration;

use baton::store::RUN_SEARCH_PROBE_IDS as PROBE_IDS;
use baton::store::{Finish, Store};
use domain::filter::run::{self as run_filter, RunFilter};
use domain::model::{RunStatus, RunView};
use domain::search::{RunList, RunQuery};
use domain::time::Ts;
use serde_json::json;

use crate::common::store::{claim, done, noop_tasks, promote, task_named};
use crate::common::{Kind, TestDb, plan};
use crate::per_backend;

per_backend!(cases:
    every_filter_finds_what_the_history_says,
    bad_cursors_and_empty_databases_answer_plainly,
);

const HOUR: Duration = Duration::from_secs(3600);

/// Promotes and claims every AVAILABLE run as `replica` at `now`; the
/// claimed ids.
async fn claim_as(s: &dyn Store, replica: &str, now: Ts) -> Vec<i64> {
    promote(s).await;
    let mut ids = Vec::new();
    loop {
        let claimed = s
            .run_claim_many(&claim(replica, &[], 1000), now)
            .await
            .unwrap();
        if claimed.is_empty() {
            return ids;
        }
        ids.extend(claimed.iter().map(|c| c.id));
    }
}

fn failed_with(run_id: i64, error: &str) -> Finish {
    Finish {
        run_id,
        status: RunStatus::Failed,
        result_code: Some(1),
        error: Some(error.into()),
    }
}

/// The run id of task `name` of plan `plan` now.
async fn run_of(s: &dyn Store, plan: i64, name: &str) -> i64 {
    let view = s.plan_get(plan).await.unwrap();
    task_named(&view, name).run_id.expect("task has a run")
}

/// A run with what the search reads of its plan.
struct Seen {
    run: RunView,
    plan_name: String,
    submitted_by: String,
}

/// Does `run` match `f`, read plainly off its view?
fn matches(f: &RunFilter, seen: &Seen) -> bool {
    let Seen {
        run,
        plan_name,
        submitted_by,
    } = seen;
    let finished = run.finished_at.map(Ts::from);
    f.status.is_none_or(|s| run.status == s)
        && f.target
            .as_ref()
            .is_none_or(|t| run.target.starts_with(t.as_str()))
        && f.plan
            .as_ref()
            .is_none_or(|p| plan_name.to_lowercase().contains(&p.to_lowercase()))
        && f.replica.as_ref().is_none_or(|r| {
            run.replica_id.as_ref() == Some(r)
                && (finished.is_some() || run.status == RunStatus::Running)
        })
        && f.actor.as_ref().is_none_or(|a| {
            // Who submitted the plan, or acted on the run since: not a
            // replica about its own run, not the scheduler.
            submitted_by == a
                || run.events.iter().any(|e| {
                    &e.actor == a
                        && e.actor != "scheduler"
                        && e.replica_id.as_ref() != Some(&e.actor)
                        && e.detail.as_deref() != Some("submitted")
                })
        })
        && f.error.as_ref().is_none_or(|text| {
            matches!(run.status, RunStatus::Failed | RunStatus::Canceled)
                && run
                    .error
                    .as_ref()
                    .is_some_and(|e| e.to_lowercase().contains(&text.to_lowercase()))
        })
        && f.since
            .is_none_or(|since| finished.is_some_and(|at| at.0 >= since))
        && f.until
            .is_none_or(|until| finished.is_some_and(|at| at.0 < until))
}

/// Every page of the search for `f`, `limit` runs at a time; checks each
/// page is newest first and the cursor moves on.
async fn all_pages(s: &dyn Store, f: &RunFilter, limit: i64) -> Vec<i64> {
    let mut ids = Vec::new();
    let mut before = None;
    loop {
        let RunList { runs, next_before } = s.run_search(f, before, limit).await.unwrap();
        assert!(runs.len() as i64 <= limit);
        ids.extend(runs.iter().map(|r| r.id));
        match next_before {
            None => return ids,
            Some(next) => {
                assert_eq!(runs.len() as i64, limit, "only a full page has a next");
                assert_eq!(Some(next), runs.last().map(|r| r.id));
                before = Some(next);
            }
        }
    }
}

/// The search form filled in with `pairs` (field, value).
pub fn query(pairs: &[(&str, &str)]) -> RunQuery {
    let mut q = RunQuery::default();
    for (name, value) in pairs {
        let value = Some((*value).to_owned());
        match *name {
            "status" => q.status = value,
            "target" => q.target = value,
            "plan" => q.plan = value,
            "replica" => q.replica = value,
            "actor" => q.actor = value,
            "error" => q.error = value,
            "since" => q.since = value,
            "until" => q.until = value,
            other => panic!("no field {other}"),
        }
    }
    q
}

mod cases {
    use super::*;

    pub async fn every_filter_finds_what_the_history_says(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let t0 = Ts::now();
        let old = t0.minus(HOUR * 3);

        // Old history: a release by alice, a hostile target name, a
        // deadlock retried by carol.
        let release = s
            .plan_insert(
                &plan(json!({"name": "Release-Orders", "tasks": [
                    {"name": "a", "target": "db/orders", "sleep": "0s"},
                    {"name": "b", "target": "db/orders-replica", "sleep": "0s"},
                    {"name": "c", "target": "svc/api", "sleep": "0s"},
                    {"name": "d", "target": "db/100%_off", "sleep": "0s"},
                ]})),
                "alice".into(),
                old,
            )
            .await
            .unwrap();
        claim_as(s, "r-1", old).await;
        let (a, b, c, d) = (
            run_of(s, release, "a").await,
            run_of(s, release, "b").await,
            run_of(s, release, "c").await,
            run_of(s, release, "d").await,
        );
        s.run_finish_many(
            "r-1",
            &[
                failed_with(a, "ERROR: deadlock detected on relation orders"),
                done(b),
                done(c),
                failed_with(d, "exit 2: 100% of _ disk used"),
            ],
            old,
        )
        .await
        .unwrap();
        let a_task = task_named(&s.plan_get(release).await.unwrap(), "a").id;
        s.task_retry(a_task, "carol".into(), old).await.unwrap();
        claim_as(s, "r-2", old).await;
        let a2 = run_of(s, release, "a").await;
        s.run_finish_many("r-2", &[done(a2)], old.plus(HOUR / 2))
            .await
            .unwrap();

        // A long middle: 4,200 runs, more than the probe reads.
        let filler_at = t0.minus(HOUR);
        let filler = s
            .plan_insert(
                &plan(json!({"name": "filler", "tasks": noop_tasks(4200)})),
                "filler-bot".into(),
                filler_at,
            )
            .await
            .unwrap();
        let filler_runs = claim_as(s, "r-filler", filler_at).await;
        assert_eq!(filler_runs.len(), 4200);
        let finishes: Vec<Finish> = filler_runs.iter().map(|&id| done(id)).collect();
        s.run_finish_many("r-filler", &finishes, filler_at)
            .await
            .unwrap();

        // New history: bob's nightly ETL, one run RUNNING, one failed on a
        // timeout, one cancelled by dave, one still PENDING behind another.
        let nightly = s
            .plan_insert(
                &plan(json!({"name": "nightly-etl", "tasks": [
                    {"name": "e", "target": "db/users", "sleep": "0s"},
                    {"name": "f", "target": "db/orders", "sleep": "0s"},
                    {"name": "g", "target": "svc/web", "sleep": "0s"},
                    {"name": "h", "target": "db/orders-replica", "sleep": "0s", "depends_on": ["e"]},
                ]})),
                "bob".into(),
                t0,
            )
            .await
            .unwrap();
        claim_as(s, "r-1", t0).await;
        let (f, g) = (run_of(s, nightly, "f").await, run_of(s, nightly, "g").await);
        s.run_finish_many(
            "r-1",
            &[failed_with(f, "timeout: Deadlock? no, lock_timeout")],
            t0,
        )
        .await
        .unwrap();
        let g_task = task_named(&s.plan_get(nightly).await.unwrap(), "g").id;
        assert_eq!(run_of(s, nightly, "g").await, g);
        s.task_cancel(g_task, "dave".into(), t0).await.unwrap();
        // r-1 kills it and confirms: CANCELED in dave's name.
        s.run_finish_many("r-1", &[failed_with(g, "killed")], t0)
            .await
            .unwrap();

        // The history, read plainly: every run with its plan's name.
        let mut history: Vec<Seen> = Vec::new();
        let all = all_pages(s, &RunFilter::default(), 500).await;
        assert_eq!(
            all.len() as i64,
            db.count("SELECT COUNT(*) FROM task_run").await
        );
        assert!(all.windows(2).all(|w| w[0] > w[1]), "newest first");
        let mut plans = std::collections::HashMap::new();
        for id in all {
            let run = s.run_get(id).await.unwrap();
            if let std::collections::hash_map::Entry::Vacant(e) = plans.entry(run.plan_id) {
                let plan = s.plan_get(run.plan_id).await.unwrap();
                e.insert((plan.name, plan.created_by));
            }
            let (plan_name, submitted_by) = plans[&run.plan_id].clone();
            history.push(Seen {
                run,
                plan_name,
                submitted_by,
            });
        }
        let newest = history[0].run.id;
        assert!(
            a < newest - PROBE_IDS,
            "the old runs lie beyond the probe's reach"
        );

        let minute = Duration::from_secs(60);
        let cases: Vec<Vec<(&str, &str)>> = vec![
            vec![],
            vec![("status", "failed")],
            vec![("status", "CANCELED")],
            vec![("status", "RUNNING")],
            vec![("status", "PENDING")],
            vec![("status", "AVAILABLE")],
            vec![("status", "DONE")],
            vec![("target", "db/")],
            vec![("target", "db/orders")],
            vec![("target", "db/orders-")],
            vec![("target", "db/100%")],
            vec![("target", "db/1%")],
            vec![("target", "svc")],
            vec![("target", "x41")],
            vec![("target", "nothing/here")],
            vec![("plan", "ORDERS")],
            vec![("plan", "etl")],
            vec![("plan", "_")],
            vec![("plan", "fill")],
            vec![("replica", "r-1")],
            vec![("replica", "r-2")],
            vec![("replica", "r-filler")],
            vec![("replica", "r-none")],
            vec![("actor", "alice")],
            vec![("actor", "carol")],
            vec![("actor", "dave")],
            vec![("actor", "bob")],
            vec![("actor", "r-1")],
            vec![("actor", "scheduler")],
            vec![("error", "DEADLOCK")],
            vec![("error", "100%")],
            vec![("error", "%_")],
            vec![("error", "timeout")],
            vec![("since", "90m")],
            vec![("until", "90m")],
            vec![("since", "4h"), ("until", "2h")],
            vec![("status", "FAILED"), ("target", "db/orders")],
            vec![("status", "DONE"), ("replica", "r-2"), ("plan", "release")],
            vec![("actor", "alice"), ("since", "1d")],
            vec![("target", "db/"), ("until", "2h")],
            vec![("error", "deadlock"), ("replica", "r-1"), ("until", "1h")],
        ];
        for pairs in cases {
            let q = query(&pairs);
            let filter = run_filter::parse(&q, t0.plus(minute).into()).unwrap();
            let expected: Vec<i64> = history
                .iter()
                .filter(|seen| matches(&filter, seen))
                .map(|seen| seen.run.id)
                .collect();
            // Small pages where they stay few, to cross the probe's edge
            // mid-page; the thousands of filler runs a page of 500.
            let limits: &[i64] = if expected.len() <= 60 {
                &[3, 50]
            } else {
                &[500]
            };
            for &limit in limits {
                let found = all_pages(s, &filter, limit).await;
                assert_eq!(found, expected, "{pairs:?}, {limit} a page");
            }
        }
        // Who did what: carol's retry, dave's cancel of a RUNNING run (its
        // event names the replica too), alice's plan, retry included.
        let by = |actor: &str| run_filter::parse(&query(&[("actor", actor)]), t0.into()).unwrap();
        assert_eq!(all_pages(s, &by("carol"), 50).await, [a2]);
        assert_eq!(all_pages(s, &by("dave"), 50).await, [g]);
        assert_eq!(all_pages(s, &by("alice"), 50).await, [a2, d, c, b, a]);
        assert!(all_pages(s, &by("r-1"), 50).await.is_empty());
        // Some cases reach both sides of the probe's edge.
        let orders = run_filter::parse(&query(&[("target", "db/orders")]), t0.into()).unwrap();
        let found: BTreeSet<i64> = all_pages(s, &orders, 50).await.into_iter().collect();
        assert!(
            found.contains(&a) && found.contains(&f) && found.contains(&a2),
            "{found:?}"
        );
        let _ = filler;
    }

    pub async fn bad_cursors_and_empty_databases_answer_plainly(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let any = RunFilter::default();
        assert_eq!(s.run_search(&any, None, 50).await.unwrap().runs.len(), 0);
        let id = s
            .plan_insert(
                &plan(
                    json!({"name": "one", "tasks": [{"name": "a", "target": "x", "sleep": "0s"}]}),
                ),
                "t".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        let run = run_of(s, id, "a").await;
        for before in [1, i64::MIN, -5] {
            let page = s.run_search(&any, Some(before), 50).await.unwrap();
            assert!(
                page.runs.is_empty() && page.next_before.is_none(),
                "before {before}"
            );
        }
        let page = s.run_search(&any, Some(i64::MAX), 50).await.unwrap();
        assert_eq!(page.runs.iter().map(|r| r.id).collect::<Vec<_>>(), [run]);
        let page = s.run_search(&any, Some(run + 1), 1).await.unwrap();
        assert_eq!((page.runs.len(), page.next_before), (1, None));
    }
}
