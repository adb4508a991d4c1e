//! The store reads behind the dashboard — plan list filters and search,
//! the overview's counts and per-minute history, a run's log tail — on
//! SQLite and PostgreSQL alike.

use std::collections::BTreeMap;
use std::time::Duration;

use baton::store::{CHART_MINUTES, LogLine, Store};
use domain::model::{PlanStatus, RunStatus};
use domain::time::Ts;
use serde_json::json;

use crate::common::store::{done, failed, promote, promote_and_claim};
use crate::common::{Kind, TestDb, plan};
use crate::per_backend;

per_backend!(cases:
    every_status_filter_matches_the_derived_status,
    name_search_ignores_case_and_takes_wildcards_literally,
    overview_counts_live_runs_and_the_last_hour,
    log_tail_keeps_the_end_in_order,
);

/// A plan of `tasks` sleep tasks, each on its own target.
fn plan_of(name: &str, tasks: usize, start: bool) -> baton::plan::NewPlan {
    let tasks: Vec<_> = (0..tasks)
        .map(|i| json!({"name": format!("t{i}"), "target": format!("{name}/{i}"), "sleep": "0s"}))
        .collect();
    plan(json!({"name": name, "start": start, "tasks": tasks}))
}

async fn finish(s: &dyn Store, runs: &[i64], how: fn(i64) -> baton::store::Finish, at: Ts) {
    let finishes: Vec<_> = runs.iter().map(|&id| how(id)).collect();
    let report = s.run_finish_many("r-test", &finishes, at).await.unwrap();
    assert_eq!(report.finished.len(), runs.len());
}

mod cases {
    use super::*;

    pub async fn every_status_filter_matches_the_derived_status(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let now = Ts::now;

        let done_plan = s
            .plan_insert(&plan_of("done", 2, true), "t".into(), now())
            .await
            .unwrap();
        let runs = promote_and_claim(s).await;
        finish(s, &runs, done, now()).await;

        let failed_plan = s
            .plan_insert(&plan_of("failed", 2, true), "t".into(), now())
            .await
            .unwrap();
        let runs = promote_and_claim(s).await;
        finish(s, &runs[..1], failed, now()).await;
        finish(s, &runs[1..], done, now()).await;

        // A failure an operator skipped completes the plan.
        let skipped_plan = s
            .plan_insert(&plan_of("skipped", 1, true), "t".into(), now())
            .await
            .unwrap();
        let runs = promote_and_claim(s).await;
        finish(s, &runs, failed, now()).await;
        let task = s.plan_get(skipped_plan).await.unwrap().tasks[0].id;
        s.task_skip(task, "t".into(), now()).await.unwrap();

        let canceled_plan = s
            .plan_insert(&plan_of("canceled", 2, true), "t".into(), now())
            .await
            .unwrap();
        s.plan_cancel(canceled_plan, "t".into(), now())
            .await
            .unwrap();

        let running_plan = s
            .plan_insert(&plan_of("running", 2, true), "t".into(), now())
            .await
            .unwrap();
        let not_started = s
            .plan_insert(&plan_of("waiting", 2, false), "t".into(), now())
            .await
            .unwrap();

        let want: BTreeMap<PlanStatus, Vec<i64>> = BTreeMap::from([
            (PlanStatus::Done, vec![skipped_plan, done_plan]),
            (PlanStatus::Failed, vec![failed_plan]),
            (PlanStatus::Canceled, vec![canceled_plan]),
            (PlanStatus::Running, vec![running_plan]),
            (PlanStatus::NotStarted, vec![not_started]),
        ]);
        for (status, ids) in want {
            let list = s.plan_list(Some(status), None, 10, 0).await.unwrap();
            let got: Vec<i64> = list.plans.iter().map(|p| p.id).collect();
            assert_eq!(got, ids, "plans listed as {status}");
            assert_eq!(list.total, ids.len() as i64, "total of {status}");
            for summary in &list.plans {
                let view = s.plan_get(summary.id).await.unwrap();
                assert_eq!(view.status, status, "plan {} derives {status}", view.name);
                assert_eq!(summary.status, status);
            }
        }
        let all = s.plan_list(None, None, 2, 2).await.unwrap();
        assert_eq!(all.total, 6);
        assert_eq!(
            all.plans.iter().map(|p| p.id).collect::<Vec<_>>(),
            vec![canceled_plan, skipped_plan],
            "the third and fourth newest"
        );
    }

    pub async fn name_search_ignores_case_and_takes_wildcards_literally(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let mut ids = BTreeMap::new();
        for name in [
            "Release-42",
            "release-43",
            "hotfix_1",
            "hotfix-2",
            "100%-done",
            "ÉTÉ-Deploy",
            "été-deploy",
            "ΣΊΣΥΦΟΣ",
        ] {
            let id = s
                .plan_insert(&plan_of(name, 1, false), "t".into(), Ts::now())
                .await
                .unwrap();
            ids.insert(name, id);
        }
        let found = |q: &'static str| {
            let s = s.clone();
            async move {
                let list = s.plan_list(None, Some(q), 10, 0).await.unwrap();
                let names: Vec<String> = list.plans.into_iter().map(|p| p.name).collect();
                assert_eq!(list.total, names.len() as i64, "total for {q:?}");
                names
            }
        };
        assert_eq!(found("RELEASE").await, ["release-43", "Release-42"]);
        assert_eq!(found("_").await, ["hotfix_1"], "`_` is not a wildcard");
        assert_eq!(found("%").await, ["100%-done"], "`%` is not a wildcard");
        assert_eq!(found("hotfix").await, ["hotfix-2", "hotfix_1"]);
        assert!(found("nothing").await.is_empty());
        // Any case means ASCII letters in any case, on both backends alike
        // (SQLite's LOWER folds no other); every name finds itself.
        assert_eq!(found("DEPLOY").await, ["été-deploy", "ÉTÉ-Deploy"]);
        assert_eq!(found("ÉTÉ-deploy").await, ["ÉTÉ-Deploy"]);
        assert_eq!(found("été").await, ["été-deploy"]);
        assert_eq!(found("ΣΊΣΥΦΟΣ").await, ["ΣΊΣΥΦΟΣ"]);
        let filtered = s
            .plan_list(Some(PlanStatus::NotStarted), Some("fix"), 1, 1)
            .await
            .unwrap();
        assert_eq!(filtered.total, 2);
        assert_eq!(filtered.plans[0].id, ids["hotfix_1"]);
    }

    pub async fn overview_counts_live_runs_and_the_last_hour(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let now = Ts::now();
        let two_hours_ago = now.minus(Duration::from_secs(7_200));

        s.plan_insert(&plan_of("work", 5, true), "t".into(), now)
            .await
            .unwrap();
        let runs = promote_and_claim(s).await;
        assert_eq!(runs.len(), 5);
        finish(s, &runs[..2], done, now).await;
        finish(s, &runs[2..3], failed, now).await;
        // Finished long ago: outside the chart and the hour's counts.
        finish(s, &runs[3..4], done, two_hours_ago).await;
        // runs[4] stays RUNNING.
        s.plan_insert(&plan_of("ready", 1, true), "t".into(), now)
            .await
            .unwrap();
        promote(s).await;
        s.plan_insert(&plan_of("queued", 3, true), "t".into(), now)
            .await
            .unwrap();

        let stats = s.overview_stats(now).await.unwrap();
        assert_eq!(
            stats.live,
            BTreeMap::from([
                (RunStatus::Pending, 3),
                (RunStatus::Available, 1),
                (RunStatus::Running, 1),
            ])
        );
        assert_eq!(
            stats.last_hour,
            BTreeMap::from([
                (RunStatus::Done, 2),
                (RunStatus::Failed, 1),
                (RunStatus::Canceled, 0),
            ])
        );
        assert_eq!(stats.per_minute.len(), CHART_MINUTES as usize);
        let current = stats.per_minute.last().unwrap();
        assert_eq!((current.done, current.failed, current.canceled), (2, 1, 0));
        assert!(current.minute <= now.0 && now.0 - current.minute < chrono::TimeDelta::minutes(1));
        assert!(
            stats.per_minute[..CHART_MINUTES as usize - 1]
                .iter()
                .all(|m| m.total() == 0),
            "nothing else finished in the hour"
        );
        assert!(
            stats
                .per_minute
                .windows(2)
                .all(|w| w[1].minute - w[0].minute == chrono::TimeDelta::minutes(1))
        );
        assert_eq!(stats.failures.len(), 1);
        let failure = &stats.failures[0];
        assert_eq!(
            (failure.run_id, failure.plan_name.as_str()),
            (runs[2], "work")
        );
        assert_eq!(failure.error.as_deref(), Some("exited with code 3"));
        assert_eq!(failure.replica_id.as_deref(), Some("r-test"));
    }

    pub async fn log_tail_keeps_the_end_in_order(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        s.plan_insert(&plan_of("log", 1, true), "t".into(), Ts::now())
            .await
            .unwrap();
        let run = promote_and_claim(s.as_ref()).await[0];
        let lines: Vec<LogLine> = (0..10)
            .map(|i| LogLine {
                at: Ts::now(),
                stream: if i == 9 { "stderr" } else { "stdout" },
                line: format!("line {i}"),
            })
            .collect();
        assert!(s.run_log_append("r-test", run, &lines).await.unwrap());

        let tail = s.run_log_tail(run, 3).await.unwrap();
        assert_eq!(tail.total, 10);
        let text: Vec<&str> = tail.lines.iter().map(|l| l.line.as_str()).collect();
        assert_eq!(text, ["line 7", "line 8", "line 9"]);
        assert_eq!(tail.lines[2].stream, "stderr");
        let whole = s.run_log_tail(run, 50).await.unwrap();
        assert_eq!((whole.total, whole.lines.len()), (10, 10));
        let empty = s.run_log_tail(run + 1000, 5).await.unwrap();
        assert_eq!((empty.total, empty.lines.len()), (0, 0));
    }
}
