//! A plan read back from its rows, on SQLite and PostgreSQL: its export
//! (JSON and YAML) submits the same plan again, and the task definitions
//! the pages and the API show hold none of its secrets.

use baton::plan_export::{definition, document, yaml};
use baton::store::{Store, StoredPlan, StoredTask};
use domain::definition::{ExecutorView, TaskDefinition};
use domain::time::Ts;
use serde_json::{Value, json};

use crate::common::{Kind, TestDb, plan};
use crate::per_backend;

per_backend!(cases:
    an_export_submits_the_same_plan_again,
    definitions_show_what_runs_and_hide_secrets,
    a_missing_plan_has_no_export,
    a_plan_held_for_run_is_exported_held,
    plans_stored_before_the_start_flag_are_read_as_submitted,
);

/// Every field a plan file can set, secrets included.
fn rich_plan() -> Value {
    json!({
        "name": "release-42",
        "description": "two lines\nof description",
        "parallel_limit": 2,
        "webhooks": [
            {"url": "https://chat.example/hook", "secret": "hook-secret"},
            {"url": "https://other.example/hook"},
        ],
        "stages": [
            {"name": "migrate"},
            {"name": "deploy", "approval": "two-person", "approvers": ["alice", "bob"]},
        ],
        "tasks": [
            {"name": "backup", "target": "db/orders", "sleep": "1s 500ms"},
            {"name": "migrate-orders", "stage": "migrate", "target": "db/orders",
             "version": "0042", "depends_on": ["backup"], "timeout": "10m",
             "max_attempts": 3, "heartbeat_interval": "2s", "heartbeat_timeout": "10s",
             "command": {"argv": ["psql", "--password=hunter2", "-c", "select 'it''s'", "--auth-token", "tk9", "postgres://me:pw2@db/x"],
                         "env": {"PGPASSWORD": "s3cret", "MODE": "fast"}, "cwd": "/tmp"}},
            {"name": "warm-cache", "stage": "migrate", "target": "cache/eu", "exclusive": false,
             "node": "gpu", "reassign_after": "never", "run_at": "2026-11-22T14:05:00Z",
             "approval": "required",
             "http": {"url": "https://u:pw@api.example/warm?token=t0k", "method": "POST",
                      "headers": {"Authorization": "Bearer abc"}, "body": "{\"x\": 1}",
                      "expect": [200, 204]}},
            {"name": "deploy-eu", "stage": "deploy", "target": "app/eu", "node": "eu",
             "reassign_after": "90s", "sleep": "0s"},
            {"name": "true", "target": "yes", "version": "1.10", "sleep": "1h 1ms"},
        ],
    })
}

/// A task without its ids, to compare two submits of one file.
fn comparable(t: &StoredTask) -> String {
    let mut t = t.clone();
    t.id = 0;
    format!("{t:?}")
}

/// The edges by task name, to compare two submits of one file.
fn named_edges(stored: &StoredPlan) -> Vec<(String, String)> {
    let name = |id: i64| {
        stored
            .tasks
            .iter()
            .find(|t| t.id == id)
            .map(|t| t.name.clone())
            .unwrap()
    };
    let mut edges: Vec<_> = stored
        .edges
        .iter()
        .map(|&(task, dep)| (name(task), name(dep)))
        .collect();
    edges.sort();
    edges
}

fn assert_same(a: &StoredPlan, b: &StoredPlan) {
    assert_eq!(format!("{:?}", a.plan), format!("{:?}", b.plan));
    let tasks = |p: &StoredPlan| p.tasks.iter().map(comparable).collect::<Vec<_>>();
    assert_eq!(tasks(a), tasks(b));
    assert_eq!(named_edges(a), named_edges(b));
}

async fn submit(s: &dyn Store, file: Value) -> i64 {
    s.plan_insert(&plan(file), "alice".into(), Ts::now())
        .await
        .unwrap()
}

mod cases {
    use super::*;

    pub async fn an_export_submits_the_same_plan_again(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let first = s.plan_stored(submit(&*s, rich_plan()).await).await.unwrap();
        assert_eq!(first.tasks.len(), 5);
        let exported = document(&first);
        assert!(exported.get("start").is_none(), "it started: {exported}");
        // The stage's edges are not written again as depends_on, and the
        // stage's approval is not copied onto its tasks.
        let tasks = exported["tasks"].as_array().unwrap();
        assert_eq!(tasks[1]["depends_on"], json!(["backup"]));
        assert!(tasks[3].get("depends_on").is_none(), "{}", tasks[3]);
        assert!(tasks[3].get("approval").is_none(), "{}", tasks[3]);
        assert_eq!(tasks[2]["approval"], json!("required"));

        let again = s
            .plan_stored(submit(&*s, exported.clone()).await)
            .await
            .unwrap();
        assert_same(&first, &again);

        // The YAML form reads back as the same document: "0042", "1.10"
        // and a task named "true" stay strings.
        let text = yaml(&exported).unwrap();
        let from_yaml = baton::plan::parse_yaml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let id = s
            .plan_insert(&from_yaml, "alice".into(), Ts::now())
            .await
            .unwrap();
        assert_same(&first, &s.plan_stored(id).await.unwrap());
    }

    pub async fn definitions_show_what_runs_and_hide_secrets(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let stored = s.plan_stored(submit(&*s, rich_plan()).await).await.unwrap();
        let defs: Vec<TaskDefinition> = stored.tasks.iter().map(definition).collect();
        let text = serde_json::to_string(&defs).unwrap();
        for secret in [
            "hunter2",
            "tk9",
            "pw2",
            "s3cret",
            "fast",
            "Bearer abc",
            ":pw@",
            "t0k",
            "{\\\"x\\\"",
        ] {
            assert!(!text.contains(secret), "{secret} shows in {text}");
        }
        let migrate = &defs[1];
        assert_eq!(
            migrate.executor,
            ExecutorView::Command {
                argv: [
                    "psql",
                    "--password=***",
                    "-c",
                    "select 'it''s'",
                    "--auth-token",
                    "***",
                    "postgres://me:***@db/x"
                ]
                .map(String::from)
                .to_vec(),
                env_names: vec!["MODE".into(), "PGPASSWORD".into()],
                cwd: Some("/tmp".into()),
            }
        );
        assert_eq!(migrate.timeout_ms, 600_000);
        assert_eq!(migrate.max_attempts, 3);
        assert_eq!(migrate.retry_backoff_ms, vec![1_000, 2_000]);
        assert_eq!(
            (migrate.heartbeat_interval_ms, migrate.heartbeat_timeout_ms),
            (Some(2_000), Some(10_000))
        );
        assert_eq!(
            defs[2].executor,
            ExecutorView::Http {
                url: "https://u:***@api.example/warm?token=***".into(),
                method: "POST".into(),
                header_names: vec!["Authorization".into()],
                body_bytes: Some(8),
                expect: vec![200, 204],
            }
        );
        assert_eq!(defs[2].node.as_deref(), Some("gpu"));
        assert_eq!(defs[2].reassign_after_ms, None);
        assert!(defs[2].run_at.is_some());
        assert_eq!(defs[3].reassign_after_ms, Some(90_000));
        assert_eq!(defs[0].executor, ExecutorView::Sleep { duration_ms: 1_500 });
        assert_eq!(defs[0].retry_backoff_ms, Vec::<i64>::new());
        assert_eq!(defs[0].timeout_ms, 3_600_000);

        // The run's page reads the same definition for its task.
        let one = s.tasks_stored(&[stored.tasks[1].id]).await.unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(definition(&one[0]), defs[1]);
    }

    pub async fn a_missing_plan_has_no_export(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let missing = s.plan_stored(1_000_000).await.unwrap_err();
        assert_eq!(missing.to_string(), "plan 1000000 does not exist");
        assert!(s.tasks_stored(&[1_000_000]).await.unwrap().is_empty());
    }

    /// A plan submitted with `start: false` exports `"start": false`, before
    /// and after an operator's Run, and its export submitted again waits
    /// for a Run too.
    pub async fn a_plan_held_for_run_is_exported_held(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let mut file = rich_plan();
        file["start"] = json!(false);
        let held = submit(&*s, file).await;
        let first = s.plan_stored(held).await.unwrap();
        assert!(!first.plan.starts_on_submit);
        let exported = document(&first);
        assert_eq!(exported["start"], json!(false), "{exported}");

        let again = submit(&*s, exported.clone()).await;
        assert_same(&first, &s.plan_stored(again).await.unwrap());
        assert_eq!(
            runs_of(&*s, again).await,
            0,
            "submitted again, it waits for Run"
        );

        s.plan_start(held, "ops".into(), Ts::now()).await.unwrap();
        assert_eq!(runs_of(&*s, held).await, 5);
        let after = document(&s.plan_stored(held).await.unwrap());
        assert_eq!(after, exported, "a Run changes nothing in the file");
    }

    /// Migration 0026's backfill, run over plans today's code wrote: it
    /// finds the same flag the submit stored for a plan that started, one
    /// still held, and one held and since run by an operator.
    pub async fn plans_stored_before_the_start_flag_are_read_as_submitted(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let one_task = |name: &str, start: bool| {
            json!({"name": name, "start": start,
                   "tasks": [{"name": "t", "target": "x", "sleep": "0s"}]})
        };
        let started = submit(&*s, one_task("a", true)).await;
        let held = submit(&*s, one_task("b", false)).await;
        let run_later = submit(&*s, one_task("c", false)).await;
        s.plan_start(run_later, "ops".into(), Ts::now())
            .await
            .unwrap();
        let flags = |s: std::sync::Arc<dyn Store>| async move {
            let mut out = Vec::new();
            for id in [started, held, run_later] {
                out.push(s.plan_stored(id).await.unwrap().plan.starts_on_submit);
            }
            out
        };
        assert_eq!(flags(s.clone()).await, [true, false, false]);

        // As the column's default left every plan stored before it.
        db.execute("UPDATE plan SET starts_on_submit = TRUE").await;
        assert_eq!(flags(s.clone()).await, [true, true, true]);
        let migration = match kind {
            Kind::Sqlite => include_str!("../../../migrations/sqlite/0026_plan_start_flag.sql"),
            Kind::Postgres => include_str!("../../../migrations/postgres/0026_plan_start_flag.sql"),
        };
        let backfill = &migration[migration.find("UPDATE plan").expect("the backfill")..];
        db.execute(backfill).await;
        assert_eq!(flags(s.clone()).await, [true, false, false]);
    }
}

/// How many runs plan `id` has.
async fn runs_of(s: &dyn Store, id: i64) -> usize {
    s.plan_get(id)
        .await
        .unwrap()
        .tasks
        .iter()
        .filter(|t| t.run_id.is_some())
        .count()
}
