//! The REST API over real HTTP, with the scheduler loops running: the
//! README's example plan runs to DONE, bad input is refused with the field
//! at fault and changes nothing, actions answer 409 when they do not apply,
//! and waiting causes are visible.

mod common;

use std::time::Duration;

use common::server::Server;
use common::{Kind, eventually};
use domain::audit::{AuditList, Outcome};
use domain::model::{PlanList, PlanStatus, PlanView, ReplicaView, RunView, TaskStatus};
use serde_json::{Value, json};

/// The example plan from the README.
const README_PLAN: &str = include_str!("../../examples/release-42.yaml");

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readme_example_runs_to_done_and_says_why_tasks_wait() {
    let s = Server::start(Kind::Sqlite).await;
    let r = s
        .http
        .post(format!("{}/api/v1/plans", s.base))
        .header("content-type", "application/yaml")
        .body(README_PLAN.replace(
            "RUN_AT",
            &(chrono::Utc::now() + chrono::TimeDelta::seconds(4)).to_rfc3339(),
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let view: PlanView = r.json().await.unwrap();
    assert_eq!(view.name, "release-42");
    // While it runs, each blocked task says why.
    let causes: Vec<String> = eventually(Duration::from_secs(10), "waiting causes", || async {
        let v: PlanView = s.get(&format!("/api/v1/plans/{}", view.id)).await;
        let causes: Vec<String> = v
            .tasks
            .iter()
            .filter_map(|t| t.waiting_cause.clone())
            .collect();
        let wanted = [
            "waits for run #",
            "is busy with run #",
            "plan limit",
            "scheduled for",
            // The README's plan waits for its migrate stage, named.
            "waits for stage migrate: migrate-orders",
        ];
        wanted
            .iter()
            .all(|w| causes.iter().any(|c| c.contains(w)))
            .then_some(causes)
    })
    .await;
    assert!(!causes.is_empty());
    let done = s.wait_plan(view.id, PlanStatus::Done).await;
    assert!(done.tasks.iter().all(|t| t.status == TaskStatus::Done));
    let migrate = done
        .tasks
        .iter()
        .find(|t| t.name == "migrate-orders")
        .unwrap();
    let log = s
        .http
        .get(format!(
            "{}/api/v1/runs/{}/log",
            s.base,
            migrate.run_id.unwrap()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(log.headers()["content-type"], "text/plain; charset=utf-8");
    assert!(log.text().await.unwrap().contains("migrating orders"));
    let run: RunView = s
        .get(&format!("/api/v1/runs/{}", migrate.run_id.unwrap()))
        .await;
    assert_eq!(run.events.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_plans_are_refused_with_the_field_and_change_nothing() {
    let s = Server::start(Kind::Sqlite).await;
    let cases = [
        (
            json!({"tasks": [{"name": "a", "target": "t", "sleep": "1s"}]}),
            "name",
        ),
        (
            json!({"name": "", "tasks": [{"name": "a", "target": "t", "sleep": "1s"}]}),
            "name",
        ),
        (
            json!({"name": "p", "oops": 1, "tasks": [{"name": "a", "target": "t", "sleep": "1s"}]}),
            "oops",
        ),
        (
            json!({"name": "p", "parallel_limit": 0, "tasks": [{"name": "a", "target": "t", "sleep": "1s"}]}),
            "parallel_limit",
        ),
        (
            json!({"name": "p", "tasks": [{"name": "a", "target": "t", "sleep": "1s"}, {"name": "a", "target": "t", "sleep": "1s"}]}),
            "tasks[1].name",
        ),
        (
            json!({"name": "p", "tasks": [{"name": "a", "target": "t", "sleep": "1s"}, {"name": "b", "target": "t", "sleep": "1s"}, {"name": "c", "target": "t", "timeout": "soon", "sleep": "1s"}]}),
            "tasks[2].timeout",
        ),
        (
            json!({"name": "p", "tasks": [{"name": "a", "target": "t"}]}),
            "tasks[0].command",
        ),
        (
            json!({"name": "p", "tasks": [{"name": "a", "target": "t", "sleep": "1s", "http": {"url": "http://x"}}]}),
            "tasks[0].command",
        ),
        // Dependencies: unknown, itself, a cycle (named), a stage nobody
        // declared, an empty stage, an approval nobody can read.
        (
            json!({"name": "p", "tasks": [{"name": "a", "target": "t", "sleep": "1s", "depends_on": ["ghost"]}]}),
            "tasks[0].depends_on[0]",
        ),
        (
            json!({"name": "p", "tasks": [{"name": "a", "target": "t", "sleep": "1s", "depends_on": ["a"]}]}),
            "tasks[0].depends_on[0]",
        ),
        (
            json!({"name": "p", "tasks": [
                {"name": "x", "target": "t", "sleep": "1s"},
                {"name": "a", "target": "t", "sleep": "1s", "depends_on": ["c"]},
                {"name": "b", "target": "t", "sleep": "1s", "depends_on": ["a"]},
                {"name": "c", "target": "t", "sleep": "1s", "depends_on": ["b", "x"]}]}),
            "tasks[1].depends_on",
        ),
        (
            json!({"name": "p", "tasks": [{"name": "a", "target": "t", "sleep": "1s", "stage": "later"}]}),
            "tasks[0].stage",
        ),
        (
            json!({"name": "p", "stages": [{"name": "s1"}, {"name": "s2"}],
                "tasks": [{"name": "a", "target": "t", "sleep": "1s", "stage": "s1"}]}),
            "stages[1]",
        ),
        (
            json!({"name": "p", "tasks": [{"name": "a", "target": "t", "sleep": "1s", "approval": "maybe"}]}),
            "tasks[0].approval",
        ),
        (
            json!({"name": "p", "tasks": [{"name": "a", "target": "t", "sleep": "1s", "approvers": ["bob"]}]}),
            "tasks[0].approvers",
        ),
    ];
    let (_, cycle) = s
        .post(
            "/api/v1/plans",
            json!({"name": "p", "tasks": [
                {"name": "a", "target": "t", "sleep": "1s", "depends_on": ["c"]},
                {"name": "b", "target": "t", "sleep": "1s", "depends_on": ["a"]},
                {"name": "c", "target": "t", "sleep": "1s", "depends_on": ["b"]}]}),
        )
        .await;
    assert_eq!(cycle["error"], "cycle a → c → b → a");
    for (body, field) in cases {
        let (status, answer) = s.post("/api/v1/plans", body.clone()).await;
        assert_eq!(status, 422, "{body}");
        assert_eq!(answer["field"], field, "{body}: {answer}");
        assert!(answer["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
    let r = s
        .http
        .post(format!("{}/api/v1/plans", s.base))
        .header("content-type", "application/json")
        .body("{nope")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 422);
    let list: PlanList = s.get("/api/v1/plans").await;
    assert_eq!(list.total, 0, "nothing was written");
    for (query, field) in [
        ("status=BOGUS", "status"),
        ("limit=0", "limit"),
        ("limit=x", "limit"),
        ("offset=-1", "offset"),
    ] {
        let r = s
            .http
            .get(format!("{}/api/v1/plans?{query}", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 422, "{query}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["field"], field);
    }
    let r = s
        .http
        .get(format!("{}/api/v1/plans/abc", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 422);
    let r = s
        .http
        .get(format!("{}/api/v1/plans/999", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "plan 999 does not exist");
}

/// Whatever refuses a request (a handler, axum's extractors, the body
/// limit), the API answers with the status that names the problem and the
/// JSON error format; the dashboard never overflows on a page number.
/// `GET /api/v1/runs` filters as the store does, pages by `next_before`,
/// and refuses what it cannot read with 422 naming the parameter.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_runs_search_filters_pages_and_refuses_bad_input() {
    let s = Server::start(Kind::Sqlite).await;
    let task = |name: &str, target: &str, argv: Value| json!({"name": name, "target": target, "command": {"argv": argv}});
    let (status, body) = s
        .post(
            "/api/v1/plans",
            json!({"name": "Search Me", "tasks": [
                task("ok", "db/orders", json!(["true"])),
                task("boom", "db/users", json!(["sh", "-c", "echo deadlock >&2; exit 3"])),
                task("fine", "svc/api", json!(["true"])),
            ]}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    s.wait_plan(1, PlanStatus::Failed).await;
    let search = |query: &'static str| {
        let s = &s;
        async move {
            let list: domain::search::RunList = s.get(&format!("/api/v1/runs?{query}")).await;
            list.runs
                .iter()
                .map(|r| (r.task_name.clone(), r.status))
                .collect::<Vec<_>>()
        }
    };
    use domain::model::RunStatus::{Done, Failed};
    assert_eq!(search("status=failed").await, [("boom".to_owned(), Failed)]);
    assert_eq!(search("target=db/").await.len(), 2);
    assert_eq!(search("plan=search%20me&status=DONE").await.len(), 2);
    assert_eq!(search("error=CODE%203").await.len(), 1);
    assert_eq!(
        search("since=1h&target=svc").await,
        [("fine".to_owned(), Done)]
    );
    assert!(search("until=1h").await.is_empty());
    assert!(
        search("target=%25").await.is_empty(),
        "a % is a character, not a wildcard"
    );
    // Newest first, one a page, through every run and no further.
    let mut seen = Vec::new();
    let mut path = "/api/v1/runs?limit=1".to_owned();
    loop {
        let page: domain::search::RunList = s.get(&path).await;
        seen.extend(page.runs.iter().map(|r| r.id));
        match page.next_before {
            Some(next) => path = format!("/api/v1/runs?limit=1&before={next}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 3);
    assert!(seen.windows(2).all(|w| w[0] > w[1]), "{seen:?}");

    // Bulk: counted, refused at another count, applied at the one seen.
    let counts: Value = s.get("/api/v1/runs/bulk?status=FAILED&plan=search").await;
    assert_eq!(counts, json!({"ended_badly": 1, "live": 0}));
    let retry = |expected: i64| json!({"action": "retry", "filter": {"status": "FAILED"}, "expected": expected});
    let (status, body) = s.post("/api/v1/runs/bulk", retry(2)).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["error"],
        "the filter now matches 1 run to retry, you saw 2; nothing was changed, look again"
    );
    let (status, body) = s.post("/api/v1/runs/bulk", retry(1)).await;
    assert_eq!(
        (status, &body),
        (200, &json!({"action": "retry", "changed": 1}))
    );
    let plan: PlanView = s.get("/api/v1/plans/1").await;
    let boom = plan.tasks.iter().find(|t| t.name == "boom").unwrap();
    assert_eq!(boom.attempt, Some(2), "retried once");
    for (body, field) in [
        (
            json!({"action": "retry", "filter": {}, "expected": 1}),
            "filter",
        ),
        (json!({"action": "retry", "expected": 1}), "filter"),
        (
            json!({"action": "retry", "filter": {"since": "soon"}, "expected": 1}),
            "filter.since",
        ),
        (
            json!({"action": "retry", "filter": {"status": "FAILED"}, "expected": -1}),
            "expected",
        ),
    ] {
        let (status, answer) = s.post("/api/v1/runs/bulk", body.clone()).await;
        assert_eq!(status, 422, "{body}: {answer}");
        assert_eq!(answer["field"], field, "{body}: {answer}");
    }
    let (status, answer) = s
        .post(
            "/api/v1/runs/bulk",
            json!({"action": "delete", "filter": {"status": "FAILED"}, "expected": 1}),
        )
        .await;
    assert_eq!(status, 422, "{answer}");
    let (status, answer) = s.get_status("/api/v1/runs/bulk").await;
    assert_eq!((status, answer["field"].as_str()), (422, Some("filter")));

    let long = format!("plan={}", "x".repeat(201));
    for (query, field) in [
        ("status=LOST", "status"),
        ("since=tomorrowish", "since"),
        ("since=1h&until=2h", "until"),
        ("actor=a%00b", "actor"),
        (long.as_str(), "plan"),
        ("before=0", "before"),
        ("before=-3", "before"),
        ("before=x", "before"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("limit=99999999999999999999", "limit"),
        ("since=-5000-01-01", "since"),
        // A misspelt filter would have matched every run.
        ("stauts=FAILED", "stauts"),
    ] {
        let (status, body) = s.get_status(&format!("/api/v1/runs?{query}")).await;
        assert_eq!(status, 422, "{query}: {body}");
        assert_eq!(body["field"], field, "{query}: {body}");
    }
    for path in [
        "/api/v1/runs/bulk?target=db/&stauts=RUNNING",
        "/api/v1/plans?nmae=orders",
        "/api/v1/plans/bulk?name=x&status=FAILED&x=1",
        "/api/v1/audit?actr=alice",
        "/api/v1/deliveries?plan=1",
    ] {
        let (status, body) = s.get_status(path).await;
        assert_eq!(status, 422, "{path}: {body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("is not a parameter of"),
            "{path}: {body}"
        );
    }
    let (status, body) = s.get_status("/api/v1/plans?name=a%00b").await;
    assert_eq!(
        (status, body["field"].as_str()),
        (422, Some("name")),
        "{body}"
    );
    // Nor does a bulk body take a field it does not know: this one would
    // have cancelled for real. (The retried run has failed again first.)
    s.wait_plan(1, PlanStatus::Failed).await;
    let plan: PlanView = s.get("/api/v1/plans/1").await;
    let (status, body) = s
        .post(
            "/api/v1/runs/bulk",
            json!({"action": "cancel", "filter": {"status": "FAILED"}, "expected": 1, "dry_run": true}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("dry_run"),
        "{body}"
    );
    let (status, body) = s
        .post(
            "/api/v1/runs/bulk",
            json!({"action": "cancel", "filter": {"stauts": "FAILED"}, "expected": 1}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    let after: PlanView = s.get("/api/v1/plans/1").await;
    assert_eq!(
        serde_json::to_value(&plan.tasks).unwrap(),
        serde_json::to_value(&after.tasks).unwrap(),
        "nothing changed"
    );
}

/// Retry all from the plans list: counted over the plans the filter
/// matches, refused at another count, applied at the one seen, recorded;
/// a filter that narrows nothing or cannot be read is 422 naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bulk_actions_on_the_plans_list_are_bound_to_the_count_seen() {
    let s = Server::start(Kind::Sqlite).await;
    let failing = |name: &str| {
        json!({"name": name, "tasks": [
            {"name": "boom", "target": format!("db/{name}"), "command": {"argv": ["sh", "-c", "exit 3"]}},
            {"name": "ok", "target": format!("svc/{name}"), "sleep": "0s"},
        ]})
    };
    let mut ids = Vec::new();
    for name in ["Orders EU", "Orders US", "Billing"] {
        let (status, body) = s.post("/api/v1/plans", failing(name)).await;
        assert_eq!(status, 201, "{body}");
        let id = body["id"].as_i64().unwrap();
        s.wait_plan(id, PlanStatus::Failed).await;
        ids.push(id);
    }
    let counts: Value = s.get("/api/v1/plans/bulk?status=failed&name=orders").await;
    assert_eq!(
        counts,
        json!({"ended_badly": {"runs": 2, "plans": 2}, "live": {"runs": 0, "plans": 0}})
    );
    let retry = |expected: i64| json!({"action": "retry", "filter": {"status": "FAILED", "name": "orders"}, "expected": expected});
    let (status, body) = s.post("/api/v1/plans/bulk", retry(3)).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["error"],
        "the filter now matches 2 runs to retry, you saw 3; nothing was changed, look again"
    );
    let (status, body) = s.post("/api/v1/plans/bulk", retry(2)).await;
    assert_eq!(
        (status, &body),
        (200, &json!({"action": "retry", "changed": 2}))
    );
    for (id, attempt) in ids.iter().zip([2, 2, 1]) {
        let plan: PlanView = s.get(&format!("/api/v1/plans/{id}")).await;
        let boom = plan.tasks.iter().find(|t| t.name == "boom").unwrap();
        assert_eq!(boom.attempt, Some(attempt), "{}", plan.name);
    }
    let audit: AuditList = s.get("/api/v1/audit?action=plans.").await;
    let got: Vec<(&str, Outcome, &str, &str)> = audit
        .entries
        .iter()
        .map(|e| {
            (
                e.action.as_str(),
                e.outcome,
                e.subject.as_str(),
                e.detail.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got[0],
        (
            "plans.bulk_retry",
            Outcome::Done,
            "plans status=FAILED name=orders",
            "2 runs"
        )
    );
    assert_eq!(got[1].1, Outcome::Refused);

    for (body, field) in [
        (
            json!({"action": "retry", "filter": {}, "expected": 1}),
            "filter",
        ),
        (json!({"action": "retry", "expected": 1}), "filter"),
        (
            json!({"action": "retry", "filter": {"name": "  "}, "expected": 1}),
            "filter",
        ),
        (
            json!({"action": "retry", "filter": {"status": "LOST"}, "expected": 1}),
            "filter.status",
        ),
        (
            json!({"action": "retry", "filter": {"name": "orders"}, "expected": -1}),
            "expected",
        ),
    ] {
        let (status, answer) = s.post("/api/v1/plans/bulk", body.clone()).await;
        assert_eq!(status, 422, "{body}: {answer}");
        assert_eq!(answer["field"], field, "{body}: {answer}");
    }
    for (query, field) in [("", "filter"), ("?status=LOST", "status")] {
        let (status, answer) = s.get_status(&format!("/api/v1/plans/bulk{query}")).await;
        assert_eq!(
            (status, answer["field"].as_str()),
            (422, Some(field)),
            "{query}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_audit_log_records_actions_with_the_address_and_filters() {
    let s = Server::start(Kind::Postgres).await;
    let (status, view) = s
        .post(
            "/api/v1/plans",
            json!({"name": "audited", "start": false, "tasks": [
            {"name": "a", "target": "db/a", "sleep": "0s"}]}),
        )
        .await;
    assert_eq!(status, 201);
    let id = view["id"].as_i64().unwrap();
    // A refusal (nothing to retry), then the start, through a proxy that
    // says who the client is.
    let (status, _) = s.post_empty(&format!("/api/v1/plans/{id}/retry")).await;
    assert_eq!(status, 409);
    let r = s
        .http
        .post(format!("{}/api/v1/plans/{id}/run", s.base))
        .header("x-forwarded-for", "203.0.113.7")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);

    let all: AuditList = s.get("/api/v1/audit").await;
    let got: Vec<(&str, &str, Outcome)> = all
        .entries
        .iter()
        .map(|e| (e.action.as_str(), e.actor.as_str(), e.outcome))
        .collect();
    assert_eq!(
        got,
        [
            ("plan.start", "anonymous", Outcome::Done),
            ("plan.retry", "anonymous", Outcome::Refused),
            ("plan.submit", "anonymous", Outcome::Done),
        ]
    );
    assert!(
        all.entries
            .iter()
            .all(|e| e.address.as_deref() == Some("127.0.0.1")
                && e.plan_id == Some(id)
                && e.subject == format!("plan {id} audited"))
    );
    assert_eq!(
        all.entries[0].forwarded_for.as_deref(),
        Some("203.0.113.7"),
        "recorded as sent"
    );
    assert_eq!(all.entries[2].detail, "1 task, not started");

    let started: AuditList = s.get("/api/v1/audit?action=plan.st&since=1h").await;
    assert_eq!(started.entries.len(), 1);
    assert_eq!(started.entries[0].action, "plan.start");
    let none: AuditList = s.get("/api/v1/audit?actor=someone-else").await;
    assert!(none.entries.is_empty());
    let page: AuditList = s.get("/api/v1/audit?limit=2").await;
    assert_eq!(page.entries.len(), 2);
    let next = page.next_before.expect("a third entry");
    let rest: AuditList = s.get(&format!("/api/v1/audit?limit=2&before={next}")).await;
    assert_eq!(rest.entries.len(), 1);
    assert_eq!(rest.entries[0].action, "plan.submit");
    assert_eq!(rest.next_before, None);

    for (query, field) in [
        ("action=nope", "action"),
        ("since=tomorrowish", "since"),
        ("since=1h&until=2h", "until"),
        ("actor=a%00b", "actor"),
        ("before=0", "before"),
        ("limit=501", "limit"),
        ("limit=x", "limit"),
    ] {
        let (status, body) = s.get_status(&format!("/api/v1/audit?{query}")).await;
        assert_eq!(status, 422, "{query}: {body}");
        assert_eq!(body["field"], field, "{query}: {body}");
    }
    let (_, body) = s.get_status("/api/v1/audit?action=nope").await;
    assert!(
        body["error"].as_str().unwrap().contains("plan.submit"),
        "the refusal lists the actions: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_refusal_has_its_status_and_json() {
    let s = Server::start(Kind::Postgres).await;
    let huge = "x".repeat(baton::plan::limits::MAX_PLAN_BODY_BYTES + 1);
    let r = s
        .http
        .post(format!("{}/api/v1/plans", s.base))
        .header("content-type", "application/json")
        .body(format!(r#"{{"name": "{huge}", "tasks": []}}"#))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);
    let body: Value = r.json().await.expect("a JSON error");
    assert!(body["error"].as_str().unwrap().contains("8 MiB"), "{body}");
    let r = s
        .http
        .delete(format!("{}/api/v1/plans", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    assert!(r.headers().contains_key("allow"));
    let body: Value = r.json().await.expect("a JSON error");
    assert!(body["error"].is_string(), "{body}");
    let list: PlanList = s.get("/api/v1/plans").await;
    assert_eq!(list.total, 0, "nothing was written");
    for page in ["9223372036854775807", "-9223372036854775808", "0", "x"] {
        let r = s
            .http
            .get(format!("{}/plans?page={page}", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "/plans?page={page}");
    }
    let (status, _) = s
        .get_status("/api/v1/plans?offset=9223372036854775807")
        .await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn actions_apply_only_where_they_make_sense() {
    let s = Server::start(Kind::Sqlite).await;
    let (status, view) = s
        .post("/api/v1/plans", json!({"name": "later", "start": false, "tasks": [
            {"name": "ok", "target": "t1", "command": {"argv": ["sh", "-c", "echo fine"]}},
            {"name": "bad", "target": "t2", "command": {"argv": ["sh", "-c", "echo broken >&2; exit 3"]}},
            {"name": "lost", "target": "t3", "command": {"argv": ["pwd"], "cwd": "/no/such/dir"}},
        ]}))
        .await;
    assert_eq!(status, 201);
    let id = view["id"].as_i64().unwrap();
    assert_eq!(view["status"], "NOT_STARTED");
    let (status, body) = s.post_empty(&format!("/api/v1/plans/{id}/retry")).await;
    assert_eq!(status, 409, "{body}");
    let (status, _) = s.post_empty(&format!("/api/v1/plans/{id}/run")).await;
    assert_eq!(status, 200);
    let (status, _) = s.post_empty(&format!("/api/v1/plans/{id}/run")).await;
    assert_eq!(status, 409);
    let failed = s.wait_plan(id, PlanStatus::Failed).await;
    let bad = failed.tasks.iter().find(|t| t.name == "bad").unwrap();
    // The error quotes the command's last stderr line, where people look.
    assert_eq!(bad.error.as_deref(), Some("exited with code 3: broken"));
    let found: serde_json::Value = s.get("/api/v1/runs?error=BROKEN").await;
    assert_eq!(found["runs"].as_array().map(Vec::len), Some(1), "{found}");
    assert_eq!(found["runs"][0]["task_name"], "bad");
    // A missing working directory is named, not blamed on the program.
    let lost = failed.tasks.iter().find(|t| t.name == "lost").unwrap();
    assert_eq!(
        lost.error.as_deref(),
        Some("the working directory `/no/such/dir` does not exist on this replica")
    );
    let log = s
        .http
        .get(format!(
            "{}/api/v1/runs/{}/log",
            s.base,
            bad.run_id.unwrap()
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(log, "[stderr] broken\n");
    let ok = failed.tasks.iter().find(|t| t.name == "ok").unwrap();
    let (status, _) = s
        .post_empty(&format!("/api/v1/tasks/{}/retry", ok.id))
        .await;
    assert_eq!(status, 409, "a DONE task is not retried");
    let (status, _) = s
        .post_empty(&format!("/api/v1/tasks/{}/cancel", ok.id))
        .await;
    assert_eq!(status, 409, "a DONE task is not canceled");
    let (status, _) = s
        .post_empty(&format!("/api/v1/tasks/{}/skip", lost.id))
        .await;
    assert_eq!(status, 200);
    let (status, view) = s
        .post_empty(&format!("/api/v1/tasks/{}/skip", bad.id))
        .await;
    assert_eq!(status, 200);
    assert_eq!(view["status"], "DONE");
    let (status, _) = s.post_empty("/api/v1/tasks/abc/skip").await;
    assert_eq!(status, 422);
    let (status, _) = s.post_empty("/api/v1/tasks/4242/skip").await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_kills_a_running_command_and_timeout_fails_it() {
    let s = Server::start(Kind::Sqlite).await;
    let marker = tempfile::tempdir().unwrap();
    let child_pid = marker.path().join("child.pid");
    let script = format!("sleep 60 & echo $! > {}; wait", child_pid.display());
    let (_, view) = s
        .post("/api/v1/plans", json!({"name": "slow", "tasks": [
            {"name": "long", "target": "a", "command": {"argv": ["sh", "-c", script]}},
            {"name": "limited", "target": "b", "timeout": "300ms", "command": {"argv": ["sleep", "30"]}},
        ]}))
        .await;
    let id = view["id"].as_i64().unwrap();
    let long = eventually(
        Duration::from_secs(10),
        "long task running with its child",
        || async {
            let v: PlanView = s.get(&format!("/api/v1/plans/{id}")).await;
            let t = v.tasks.into_iter().find(|t| t.name == "long").unwrap();
            (t.status == TaskStatus::Running && child_pid.exists()).then_some(t)
        },
    )
    .await;
    let (status, _) = s
        .post_empty(&format!("/api/v1/tasks/{}/cancel", long.id))
        .await;
    assert_eq!(status, 200);
    let pid: i32 = eventually(Duration::from_secs(5), "pid file", || async {
        std::fs::read_to_string(&child_pid)
            .ok()
            .and_then(|t| t.trim().parse().ok())
    })
    .await;
    // The grandchild (in the command's process group) dies too.
    eventually(Duration::from_secs(5), "grandchild killed", || async move {
        // SAFETY: signal 0 only checks that the process exists.
        (unsafe { libc::kill(pid, 0) } != 0).then_some(())
    })
    .await;
    // One task canceled, one failed: the failure decides the plan.
    let view = s.wait_plan(id, PlanStatus::Failed).await;
    let long = view.tasks.iter().find(|t| t.name == "long").unwrap();
    assert_eq!(long.status, TaskStatus::Canceled);
    let limited = view.tasks.iter().find(|t| t.name == "limited").unwrap();
    assert_eq!(limited.status, TaskStatus::Failed);
    assert_eq!(limited.error.as_deref(), Some("timed out after 300ms"));
    let run: RunView = s
        .get(&format!("/api/v1/runs/{}", long.run_id.unwrap()))
        .await;
    assert_eq!(run.events.last().unwrap().actor, "anonymous");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn probes_and_replicas_report_this_process() {
    let s = Server::start(Kind::Sqlite).await;
    let health: Value = s.get("/healthz").await;
    assert_eq!(health["status"], "ok");
    let ready: Value = s.get("/readyz").await;
    assert_eq!(ready["status"], "ready");
    // The lease is taken by the lease loop's first round, just after start.
    let replicas: Vec<ReplicaView> =
        eventually(Duration::from_secs(10), "this process to lead", || async {
            let replicas: Vec<ReplicaView> = s.get("/api/v1/replicas").await;
            replicas.iter().all(|r| r.leader).then_some(replicas)
        })
        .await;
    assert_eq!(replicas.len(), 1);
    assert!(replicas[0].alive);
    assert!(replicas[0].leader, "on SQLite the single process leads");
    assert_eq!(replicas[0].labels, vec!["local"]);
    assert!(s.store.ready().await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn http_tasks_check_the_status() {
    let s = Server::start(Kind::Sqlite).await;
    let target = format!("{}/healthz", s.base);
    let (_, view) = s
        .post("/api/v1/plans", json!({"name": "hooks", "tasks": [
            {"name": "ok", "target": "web", "exclusive": false, "http": {"url": target, "expect": [200]}},
            {"name": "wrong", "target": "web", "exclusive": false, "http": {"url": format!("{}/api/v1/plans/77", s.base)}},
        ]}))
        .await;
    let view = s
        .wait_plan(view["id"].as_i64().unwrap(), PlanStatus::Failed)
        .await;
    let wrong = view.tasks.iter().find(|t| t.name == "wrong").unwrap();
    // The status and the start of the answer's body.
    let error = wrong.error.as_deref().unwrap();
    assert_eq!(
        error,
        r#"unexpected HTTP status 404: {"error":"plan 77 does not exist"}"#
    );
    assert_eq!(
        view.tasks.iter().find(|t| t.name == "ok").unwrap().status,
        TaskStatus::Done
    );
}

/// `/metrics` as `name{labels}` → value, after checking every sample
/// belongs to a family announced with HELP and TYPE.
fn parse_metrics(text: &str) -> std::collections::BTreeMap<String, f64> {
    let mut typed = std::collections::BTreeSet::new();
    let mut samples = std::collections::BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            typed.insert(rest.split(' ').next().unwrap().to_owned());
        } else if !line.starts_with('#') {
            let (key, value) = line.rsplit_once(' ').expect("name and value");
            let name = key.split('{').next().unwrap();
            assert!(typed.contains(name), "{name} has no # TYPE line before it");
            samples.insert(key.to_owned(), value.parse().expect("a number"));
        }
    }
    samples
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_count_runs_and_replicas_on_both_backends() {
    for kind in [Kind::Sqlite, Kind::Postgres] {
        let s = Server::start(kind).await;
        let mut tasks = common::store::noop_tasks(3);
        tasks.push(json!({"name": "later", "target": "t", "sleep": "0s",
            "run_at": "2099-01-01T00:00:00Z"}));
        let (status, view) = s
            .post("/api/v1/plans", json!({"name": "metered", "tasks": tasks}))
            .await;
        assert_eq!(status, 201, "{view}");
        let id = view["id"].as_i64().unwrap();
        eventually(Duration::from_secs(30), "three tasks DONE", || async {
            let view: PlanView = s.get(&format!("/api/v1/plans/{id}")).await;
            let done = view.tasks.iter().filter(|t| t.status == TaskStatus::Done);
            (done.count() == 3).then_some(())
        })
        .await;
        let metrics = eventually(Duration::from_secs(10), "a leading replica", || async {
            let response = s
                .http
                .get(format!("{}/metrics", s.base))
                .send()
                .await
                .unwrap();
            let content_type = response.headers()[reqwest::header::CONTENT_TYPE].clone();
            assert!(
                content_type
                    .to_str()
                    .unwrap()
                    .starts_with("text/plain; version=0.0.4"),
                "{content_type:?}"
            );
            let metrics = parse_metrics(&response.text().await.unwrap());
            (metrics["baton_replica_leader"] == 1.0).then_some(metrics)
        })
        .await;
        let expected = [
            ("baton_database_up", 1.0),
            ("baton_replica_runs_claimed_total", 3.0),
            ("baton_replica_runs_finished_total{status=\"DONE\"}", 3.0),
            ("baton_replica_runs_finished_total{status=\"FAILED\"}", 0.0),
            ("baton_replica_finishes_fenced_total", 0.0),
            ("baton_runs{status=\"PENDING\"}", 1.0),
            ("baton_runs{status=\"AVAILABLE\"}", 0.0),
            ("baton_runs{status=\"RUNNING\"}", 0.0),
            ("baton_runs_finished_last_hour{status=\"DONE\"}", 3.0),
            ("baton_replicas{alive=\"true\"}", 1.0),
            ("baton_replicas{alive=\"false\"}", 0.0),
            ("baton_plans_halted", 0.0),
            // Without users requests take no slot.
            ("baton_request_slots_held", 0.0),
            ("baton_requests_waiting", 0.0),
            ("baton_requests_refused_total", 0.0),
            ("baton_replica_runs_running", 0.0),
        ];
        for (key, value) in expected {
            assert_eq!(
                metrics.get(key),
                Some(&value),
                "{kind:?} {key}: {metrics:?}"
            );
        }
        // Who claimed them (the round or the claimer) depends on timing.
        let in_round = metrics["baton_replica_runs_claimed_in_round_total"];
        assert!((0.0..=3.0).contains(&in_round), "{in_round}");
    }
}

/// The property names a schema of the OpenAPI document lists.
fn documented(doc: &Value, schema: &str) -> std::collections::BTreeSet<String> {
    doc["components"]["schemas"][schema]["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("schema {schema} has properties"))
        .keys()
        .cloned()
        .collect()
}

fn answered(value: &Value) -> std::collections::BTreeSet<String> {
    value
        .as_object()
        .expect("an object")
        .keys()
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_openapi_document_matches_the_routes_and_the_answers() {
    let s = Server::start(Kind::Sqlite).await;
    // One plan, so every `{id}` below names something that exists.
    let (status, _) = s
        .post(
            "/api/v1/plans",
            json!({"name": "doc", "tasks": [{"name": "a", "target": "t", "sleep": "0s"}]}),
        )
        .await;
    assert_eq!(status, 201);
    let plan = s.wait_plan(1, PlanStatus::Done).await;
    let doc: Value = s.get("/api/v1/openapi.json").await;
    assert_eq!(doc["openapi"], "3.1.0");

    // Each view the API answers with carries exactly the documented fields.
    let run_id = plan.tasks[0].run_id.expect("a run");
    let plan_json: Value = s.get("/api/v1/plans/1").await;
    let list: Value = s.get("/api/v1/plans").await;
    let run: Value = s.get(&format!("/api/v1/runs/{run_id}")).await;
    let runs: Value = s.get("/api/v1/runs?status=DONE&plan=doc").await;
    let counts: Value = s.get("/api/v1/runs/bulk?status=DONE").await;
    let plan_counts: Value = s.get("/api/v1/plans/bulk?status=DONE").await;
    let replicas: Value = s.get("/api/v1/replicas").await;
    let capped = s
        .http
        .post(format!("{}/api/v1/targets/capacity", s.base))
        .json(&serde_json::json!({"target": "db/x", "capacity": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(capped.status(), 200);
    let targets: Value = s.get("/api/v1/targets").await;
    let (status, _) = s.post_empty("/api/v1/plans/1/pause").await;
    assert_eq!(status, 200);
    let paused: Value = s.get("/api/v1/paused").await;
    // Schedule 1, triggered once: its page has a plan, and a tick after
    // the server's ticker has had a round (every second here).
    let (status, schedule) = s
        .post(
            "/api/v1/schedules",
            json!({"name": "doc", "cron": "* * * * * *", "overlap": "allow",
                   "plan": {"name": "doc ${tick}", "tasks": [{"name": "a", "target": "t", "sleep": "0s"}]}}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");
    let (status, _) = s.post_empty("/api/v1/schedules/1/trigger").await;
    assert_eq!(status, 201);
    let schedule: Value = eventually(Duration::from_secs(10), "a tick", || async {
        let v: Value = s.get("/api/v1/schedules/1").await;
        (!v["ticks"].as_array().unwrap().is_empty()).then_some(v)
    })
    .await;
    let audit: Value = s.get("/api/v1/audit?action=plan.submit&limit=1").await;
    let definitions: Value = s.get("/api/v1/plans/1/definition").await;
    let views = [
        ("TaskDefinition", &definitions[0]),
        ("TaskDefinition", &run["definition"]),
        ("PlanView", &plan_json),
        ("NotificationView", &plan_json["notification"]),
        ("TaskView", &plan_json["tasks"][0]),
        ("PlanList", &list),
        ("PlanSummary", &list["plans"][0]),
        ("RunView", &run),
        ("EventView", &run["events"][0]),
        ("RunList", &runs),
        ("RunSummary", &runs["runs"][0]),
        ("BulkCounts", &counts),
        ("PlanBulkCounts", &plan_counts),
        ("PlanBulkCount", &plan_counts["live"]),
        ("ReplicaView", &replicas[0]),
        ("TargetView", &targets[0]),
        ("PausedView", &paused),
        ("PausedPlan", &paused["plans"][0]),
        ("ScheduleView", &schedule),
        ("ScheduledPlan", &schedule["plans"][0]),
        ("TickView", &schedule["ticks"][0]),
        ("AuditList", &audit),
        ("AuditEntry", &audit["entries"][0]),
    ];
    for (schema, answer) in views {
        assert_eq!(answered(answer), documented(&doc, schema), "{schema}");
        // Views always carry every field (null when unknown).
        let required: std::collections::BTreeSet<String> =
            doc["components"]["schemas"][schema]["required"]
                .as_array()
                .unwrap_or_else(|| panic!("{schema} lists its required fields"))
                .iter()
                .map(|f| f.as_str().unwrap().to_owned())
                .collect();
        assert_eq!(required, answered(answer), "{schema} required");
    }

    // Every documented operation is routed: plan 1, task 1, run 1 and
    // schedule 1 exist, so a 404 (or a 405) means the path or method is
    // not. Deletes go last, so they take nothing from the others.
    let mut operations = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().unwrap().keys() {
            let method = match method.as_str() {
                "get" => reqwest::Method::GET,
                "post" => reqwest::Method::POST,
                "put" => reqwest::Method::PUT,
                "delete" => reqwest::Method::DELETE,
                "patch" => panic!("{path}: Baton has no patch routes"),
                _ => continue,
            };
            operations.push((method, path.clone()));
        }
    }
    operations.sort_by_key(|(method, _)| *method == reqwest::Method::DELETE);
    // A replica's id is text: this server's own (drained, then resumed).
    let replica_id = replicas[0]["replica_id"].as_str().unwrap().to_owned();
    for (method, path) in &operations {
        let id = match path.starts_with("/api/v1/replicas/") {
            true => replica_id.as_str(),
            false => "1",
        };
        let url = format!("{}{}", s.base, path.replace("{id}", id));
        let response = s.http.request(method.clone(), &url).send().await.unwrap();
        let status = response.status();
        let body = response.text().await.unwrap();
        assert!(
            status != 404 && status != 405,
            "{method} {path} is documented but not routed: {status} {body}"
        );
    }
    let operations = operations.len();
    assert!(operations >= 17, "{operations} operations documented");
}

/// The command executor runs what a plan says as the server's user; an
/// operator narrows it to an allow-list or turns it off, and the policy
/// holds both at submit and on the replica that would start the program.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn allowed_commands_and_the_off_switch_hold_at_submit_and_at_run() {
    let command = |argv: Value| json!({"name": "p", "tasks": [{"name": "a", "target": "t", "command": {"argv": argv}}]});
    let s = Server::start_with(Kind::Sqlite, &["--allowed-commands", "echo,/bin/true"]).await;
    for refused in [
        json!(["sh", "-c", "echo hi"]),
        json!(["/bin/echo", "x"]),
        json!(["./echo"]),
    ] {
        let (status, body) = s.post("/api/v1/plans", command(refused.clone())).await;
        assert_eq!(status, 422, "{refused}: {body}");
        assert_eq!(body["field"], "tasks[0].command.argv[0]");
        assert!(
            body["error"].as_str().unwrap().contains("allowed commands"),
            "{body}"
        );
    }
    let list: PlanList = s.get("/api/v1/plans").await;
    assert_eq!(list.total, 0, "nothing refused was stored");
    let (status, body) = s
        .post("/api/v1/plans", command(json!(["echo", "allowed"])))
        .await;
    assert_eq!(status, 201, "{body}");
    s.wait_plan(body["id"].as_i64().unwrap(), PlanStatus::Done)
        .await;
    // A plan stored around the API (or before the policy was set) is
    // still refused by the replica that would run it.
    let sneaked = common::plan(command(json!(["sh", "-c", "touch /tmp/baton-pwned"])));
    let id = s
        .store
        .plan_insert(&sneaked, "test".into(), common::now())
        .await
        .unwrap();
    let view = s.wait_plan(id, PlanStatus::Failed).await;
    let run: RunView = s
        .get(&format!("/api/v1/runs/{}", view.tasks[0].run_id.unwrap()))
        .await;
    assert!(
        run.error
            .as_deref()
            .unwrap_or_default()
            .contains("allowed commands"),
        "{:?}",
        run.error
    );

    let off = Server::start_with(Kind::Sqlite, &["--disable-commands"]).await;
    let (status, body) = off
        .post("/api/v1/plans", command(json!(["echo", "x"])))
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("runs no commands"),
        "{body}"
    );
    let (status, body) = off
        .post(
            "/api/v1/plans",
            json!({"name": "p", "tasks": [{"name": "a", "target": "t", "sleep": "0s"}]}),
        )
        .await;
    assert_eq!(status, 201, "other executors still run: {body}");
}

/// A large plan's page shows its tasks a page at a time, with counts and
/// actions for the whole plan (a 40,000-task page was 80 MB of HTML).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_plan_page_shows_tasks_a_page_at_a_time() {
    let s = Server::start(Kind::Sqlite).await;
    let tasks: Vec<_> = (0..450)
        .map(|i| json!({"name": format!("t{i:03}"), "target": format!("t{i}"), "sleep": "0s"}))
        .collect();
    let (status, body) = s
        .post(
            "/api/v1/plans",
            json!({"name": "big", "start": false, "tasks": tasks}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_i64().unwrap();
    let page = |query: &'static str| {
        let url = format!("{}/plans/{id}{query}", s.base);
        let http = s.http.clone();
        async move {
            let r = http.get(url).send().await.unwrap();
            assert_eq!(r.status().as_u16(), 200);
            r.text().await.unwrap()
        }
    };
    let rows = |html: &str| html.matches("data-task-name=").count();
    let first = page("").await;
    assert_eq!(rows(&first), 200);
    assert!(
        first.contains("Tasks 1–200 of 450"),
        "the pager says where we are"
    );
    assert!(first.contains("data-task-name=\"t000\""));
    assert!(!first.contains("data-task-name=\"t200\""));
    // Counts and actions cover every task, not the page: all 450 can run.
    assert!(
        first.contains("450 tasks: 450 NOT_STARTED"),
        "the bar counts all"
    );
    let last = page("?page=3").await;
    assert_eq!(rows(&last), 50);
    assert!(last.contains("Tasks 401–450 of 450"));
    for beyond in ["?page=4", "?page=9223372036854775807"] {
        assert_eq!(rows(&page(beyond).await), 50, "{beyond}: the last page");
    }
    assert!(first.len() < 1_000_000, "{} bytes", first.len());
}

/// The plan page groups tasks by stage, draws a small plan's graph, links
/// each dependency to its row (on another page when it is there) and
/// names only a few of a stage's many; the targets page lists a paused
/// target.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_plan_page_shows_stages_dependencies_and_a_small_plans_graph() {
    let s = Server::start(Kind::Sqlite).await;
    let html = |path: String| {
        let (http, url) = (s.http.clone(), format!("{}{path}", s.base));
        async move {
            let r = http.get(url).send().await.unwrap();
            assert_eq!(r.status().as_u16(), 200);
            r.text().await.unwrap()
        }
    };
    let (status, body) = s
        .post(
            "/api/v1/plans",
            json!({"name": "staged", "start": false,
            "stages": [{"name": "build"}, {"name": "ship", "approval": "two-person"}],
            "tasks": [
                {"name": "compile", "stage": "build", "target": "ci/a", "sleep": "0s"},
                {"name": "lint", "stage": "build", "target": "ci/b", "sleep": "0s"},
                {"name": "deploy", "stage": "ship", "target": "svc/api", "sleep": "0s"},
                {"name": "announce", "target": "chat", "depends_on": ["deploy"], "sleep": "0s"}
            ]}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let plan: PlanView = serde_json::from_value(body).unwrap();
    let page = html(format!("/plans/{}", plan.id)).await;
    for part in [
        r#"data-stage="build""#,
        r#"data-stage="ship""#,
        "Stage 2 of 2: ship",
        "needs a two-person approval (not by the submitter)",
        "Not in a stage",
        r#"id="plan-graph""#,
    ] {
        assert!(page.contains(part), "{part} missing");
    }
    assert_eq!(page.matches("graph-node ").count(), 4, "a box per task");
    let compile = plan.tasks[0].id;
    assert!(page.contains(&format!(r##"<tr id="task-{compile}""##)));
    assert!(page.contains(&format!(
        r##"<a href="#task-{compile}" class="link">compile"##
    )));

    // Two stages of 150: each task of the second depends on all of the
    // first (22,500 dependencies), too many to draw or to name.
    let tasks: Vec<_> = (0..300)
        .map(|i| {
            let stage = if i < 150 { "a" } else { "b" };
            json!({"name": format!("{stage}{:03}", i % 150), "stage": stage,
                "target": format!("t{i}"), "sleep": "0s"})
        })
        .collect();
    let (status, body) = s
        .post(
            "/api/v1/plans",
            json!({"name": "wide", "start": false,
                "stages": [{"name": "a"}, {"name": "b"}], "tasks": tasks}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let wide: PlanView = serde_json::from_value(body).unwrap();
    let first = html(format!("/plans/{}", wide.id)).await;
    assert!(first.contains(r#"id="plan-graph-omitted""#));
    assert!(first.contains("300 tasks and 22500 dependencies"));
    assert!(!first.contains(r#"id="plan-graph""#));
    assert!(first.contains(" and 142 more"), "8 of 150 names are shown");
    assert!(first.len() < 1_000_000, "{} bytes", first.len());
    // The second page's tasks run after tasks on the first.
    let second = html(format!("/plans/{}?page=2", wide.id)).await;
    let a000 = wide.tasks[0].id;
    assert!(
        second.contains(&format!(r#"href="/plans/{}?page=1#task-{a000}""#, wide.id)),
        "a link to the row on page 1"
    );

    let (status, body) = s
        .post("/api/v1/targets/pause", json!({"target": "db/ssr"}))
        .await;
    assert_eq!(status, 200, "{body}");
    let targets = html("/targets".into()).await;
    assert!(targets.contains(r#"data-target="db/ssr" data-paused="true""#));
    assert!(targets.contains("by anonymous"));
}

/// The schedule page's edit form holds the schedule file as text: markup
/// in it (a parameter closing the textarea, a hostile name) is shown, not
/// run, and secrets in URLs are hidden there as in every other view.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_schedule_form_shows_the_file_as_text() {
    let s = Server::start(Kind::Sqlite).await;
    let injected = "</textarea><h1 id=INJECTED>owned</h1><textarea>";
    let (status, body) = s
        .post(
            "/api/v1/schedules",
            json!({"name": "inj", "cron": "0 0 1 1 *",
                "params": {"p": injected},
                "plan": {"name": "x ${p}",
                    "webhooks": [{"url": "http://hook:HOOKPW@127.0.0.1:9/x"}],
                    "tasks": [{"name": "t", "target": "t", "sleep": "0s"}]}}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_i64().unwrap();
    let page = s.text(&format!("/schedules/{id}")).await;
    assert!(page.contains("id=\"schedule-file\""), "no edit form");
    assert!(
        !page.contains("<h1 id=INJECTED>"),
        "markup from the file ran"
    );
    assert!(
        page.contains("&lt;/textarea&gt;&lt;h1 id=INJECTED&gt;"),
        "the file is not shown"
    );
    assert!(!page.contains("HOOKPW"), "a URL password on the page");
    let view: Value = s.get(&format!("/api/v1/schedules/{id}")).await;
    assert!(!view.to_string().contains("HOOKPW"), "{view}");
}

/// A target's brakes: releasing one that leaves nothing behind answers
/// 200 with the target as it now stands (it was a 404 for an action that
/// worked); a name no task could carry, or a body without `capacity`, is
/// a 422 naming the field and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn target_brakes_answer_what_they_did_and_refuse_what_no_task_could_name() {
    let s = Server::start(Kind::Sqlite).await;
    let (status, body) = s
        .post("/api/v1/targets/pause", json!({"target": "cap/d"}))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = s
        .post("/api/v1/targets/resume", json!({"target": "cap/d"}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["target"], "cap/d");
    assert!(body["paused_by"].is_null(), "{body}");
    let (status, body) = s
        .post(
            "/api/v1/targets/capacity",
            json!({"target": "cap/e", "capacity": 2}),
        )
        .await;
    assert_eq!(
        (status, body["capacity"].as_i64()),
        (200, Some(2)),
        "{body}"
    );
    let (status, body) = s
        .post(
            "/api/v1/targets/capacity",
            json!({"target": "cap/e", "capacity": null}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["capacity"].is_null(), "{body}");

    for (request, path, field) in [
        (
            json!({"target": "cap/\u{200b}a", "capacity": 2}),
            "capacity",
            "target",
        ),
        (json!({"target": "cap/\u{202e}b"}), "pause", "target"),
        (json!({"target": "cap/f"}), "capacity", "capacity"),
        (
            json!({"target": "cap/f", "capacity": 0}),
            "capacity",
            "capacity",
        ),
    ] {
        let (status, body) = s
            .post(&format!("/api/v1/targets/{path}"), request.clone())
            .await;
        assert_eq!(status, 422, "{request}: {body}");
        assert_eq!(body["field"], field, "{request}: {body}");
    }
    let targets: Value = s.get("/api/v1/targets").await;
    assert_eq!(targets, json!([]), "a refused brake changed something");
}

/// A route that reads no query string refuses one, naming the parameter,
/// and does nothing: a trigger with `?x=1` had made a plan.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn routes_without_parameters_refuse_a_query_string() {
    let s = Server::start(Kind::Sqlite).await;
    let (status, body) = s
        .post(
            "/api/v1/schedules",
            json!({"name": "q", "cron": "0 0 1 1 *",
                "plan": {"name": "p", "tasks": [{"name": "t", "target": "t", "sleep": "0s"}]}}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    for (post, path, name) in [
        (true, "/api/v1/schedules/1/trigger?x=1", "x"),
        (false, "/api/v1/schedules?name=other", "name"),
        (false, "/api/v1/replicas?since%20when=1h", "since when"),
    ] {
        let (status, body) = match post {
            true => s.post_empty(path).await,
            false => s.get_status(path).await,
        };
        assert_eq!(status, 422, "{path}: {body}");
        assert_eq!(body["field"], name, "{path}: {body}");
    }
    let plans: Value = s.get("/api/v1/plans").await;
    assert_eq!(plans["total"], 0, "the refused trigger made a plan");
    // Routes that read one still take theirs.
    let (status, _) = s.get_status("/api/v1/plans?status=DONE").await;
    assert_eq!(status, 200);
}

/// A webhook delivery that gave up is on the Overview's "needs attention"
/// strip, with its error, linked to the deliveries page; before it gives
/// up (and on a server where none did) the strip does not name it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_delivery_needs_attention_on_the_overview() {
    let s = Server::start_with(Kind::Sqlite, &["--webhook-max-attempts", "1"]).await;
    let overview = || async {
        let page = s.http.get(format!("{}/", s.base)).send().await.unwrap();
        page.text().await.unwrap()
    };
    assert!(!overview().await.contains(r#"data-kind="failed_delivery""#));
    // Port 9 (discard) is closed here: the one attempt is refused.
    let (status, body) = s
        .post(
            "/api/v1/plans",
            json!({"name": "hooked", "webhooks": [{"url": "http://127.0.0.1:9/hook"}],
                   "tasks": [{"name": "a", "target": "t", "sleep": "0s"}]}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    s.wait_plan(1, PlanStatus::Done).await;
    let page = eventually(Duration::from_secs(20), "the failed delivery", || async {
        let page = overview().await;
        page.contains(r#"data-kind="failed_delivery""#)
            .then_some(page)
    })
    .await;
    let start = page.find(r#"<li data-kind="failed_delivery""#).unwrap();
    let item = &page[start..start + page[start..].find("</li>").unwrap()];
    assert!(item.contains(r#"href="/deliveries""#), "{item}");
    assert!(
        item.contains("webhook PIPELINE_COMPLETED of plan #1 to http://127.0.0.1:9/hook gave up: "),
        "{item}"
    );
}

/// The worker protocol (docs/agents.md) on both backends, driven by hand
/// as an agent would: hello, take, beats, log lines, a fenced finish, a
/// finish, a hand-back taken again, a cancel seen in a beat and
/// confirmed, bad input named, bye.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_worker_protocol_keeps_its_promises_on_both_backends() {
    for kind in [Kind::Sqlite, Kind::Postgres] {
        worker_protocol(kind).await;
    }
}

async fn worker_protocol(kind: Kind) {
    let s = Server::start(kind).await;
    let call = |path: &'static str, body: Value| {
        let s = &s;
        async move {
            let r = s
                .http
                .post(format!("{}/api/v1/worker/{path}", s.base))
                .header("baton-worker-protocol", "1")
                .json(&body)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
        }
    };
    let hello = |labels: Value| json!({"protocol": 1, "hostname": "box", "labels": labels, "version": "t", "workers": 4});
    let (status, welcome) = call("hello", hello(json!(["remote"]))).await;
    assert_eq!(status, 200, "{kind:?}: {welcome}");
    let agent = welcome["agent_id"].as_str().unwrap().to_owned();
    assert!(agent.starts_with("a-anonymous-"), "{agent}");
    assert_eq!(
        welcome["heartbeat_interval_ms"], 200,
        "the replica's own timing"
    );
    let (_, other) = call("hello", hello(json!([]))).await;
    let other = other["agent_id"].as_str().unwrap().to_owned();

    // Pinned to a label only the agent carries: the replica's own worker
    // cannot take them.
    let (status, plan) = s
        .post(
            "/api/v1/plans",
            json!({"name": "remote", "tasks": [
                {"name": "a", "target": "r/a", "node": "remote", "sleep": "0s"},
                {"name": "b", "target": "r/b", "node": "remote", "sleep": "0s"}]}),
        )
        .await;
    assert_eq!(status, 201, "{plan}");
    let plan_id = plan["id"].as_i64().unwrap();
    let take = |agent: &str, slots: u32, wait_ms: u64| json!({"agent_id": agent, "labels": ["remote"], "slots": slots, "wait_ms": wait_ms});
    let (status, taken) = call("take", take(&agent, 5, 10_000)).await;
    assert_eq!(status, 200, "{taken}");
    let mut runs: Vec<i64> = taken["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    // A round may promote them apart: the second comes with the next take.
    if runs.len() < 2 {
        let (_, more) = call("take", take(&agent, 5, 10_000)).await;
        runs.extend(
            more["runs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["id"].as_i64().unwrap()),
        );
    }
    runs.sort_unstable();
    assert_eq!(runs.len(), 2, "{kind:?}: {taken}");
    let (a, b) = (runs[0], runs[1]);
    let deadline = taken["runs"][0]["deadline_in_ms"].as_u64().unwrap();
    assert!(deadline > 3_000_000, "an hour's default timeout: {taken}");

    let beats = |agent: &str| {
        json!({"agent_id": agent, "beats": [
            {"run_id": a, "timeout_ms": 5000}, {"run_id": b, "timeout_ms": 5000}]})
    };
    let (status, beaten) = call("runs/beat", beats(&agent)).await;
    assert_eq!(status, 200, "{beaten}");
    assert_eq!(beaten["owned"], json!([a, b]), "{beaten}");
    let (_, beaten) = call("runs/beat", beats(&other)).await;
    assert_eq!(
        beaten["owned"],
        json!([]),
        "not the other agent's: {beaten}"
    );

    let (status, kept) = call(
        "runs/log",
        json!({"agent_id": agent, "run_id": a, "lines": [
            {"at_ms_ago": 20, "stream": "stdout", "line": "hello\u{0}there"},
            {"at_ms_ago": 10, "stream": "stderr", "line": "oops"}]}),
    )
    .await;
    assert_eq!((status, &kept), (200, &json!({"owned": true})));
    let log = s.text(&format!("/api/v1/runs/{a}/log")).await;
    assert_eq!(log, "hello\u{2400}there\n[stderr] oops\n", "{kind:?}");
    let (_, kept) = call(
        "runs/log",
        json!({"agent_id": other, "run_id": a, "lines": [
            {"at_ms_ago": 0, "stream": "stdout", "line": "intruder"}]}),
    )
    .await;
    assert_eq!(kept, json!({"owned": false}));
    assert!(
        !s.text(&format!("/api/v1/runs/{a}/log"))
            .await
            .contains("intruder")
    );

    let finish = |agent: &str, run: i64, status: &str| {
        json!({"agent_id": agent, "finishes": [
            {"run_id": run, "status": status, "result_code": 0, "error": null}]})
    };
    let (_, fenced) = call("finish", finish(&other, a, "DONE")).await;
    assert_eq!(fenced["fenced"], json!([a]), "{fenced}");
    let (status, done) = call("finish", finish(&agent, a, "DONE")).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["finished"], json!([a]), "{done}");
    let run: RunView = s.get(&format!("/api/v1/runs/{a}")).await;
    assert_eq!(run.replica_id.as_deref(), Some(agent.as_str()));
    assert_eq!(run.status, domain::model::RunStatus::Done);

    // Handed back, the same run (same attempt) is taken again.
    let (status, back) = call(
        "hand-back",
        json!({"agent_id": agent, "run_ids": [b], "detail": "agent stopping"}),
    )
    .await;
    assert_eq!((status, &back["run_ids"]), (200, &json!([b])), "{back}");
    let (_, again) = call("take", take(&agent, 1, 10_000)).await;
    assert_eq!(again["runs"][0]["id"], json!(b), "{again}");
    assert_eq!(again["runs"][0]["attempt"], json!(1), "{again}");

    // An operator's cancel reaches the agent through its beat; the finish
    // confirms it.
    let view: PlanView = s.get(&format!("/api/v1/plans/{plan_id}")).await;
    let task_b = view.tasks.iter().find(|t| t.name == "b").unwrap().id;
    let (status, _) = s
        .post_empty(&format!("/api/v1/tasks/{task_b}/cancel"))
        .await;
    assert_eq!(status, 200);
    let (_, beaten) = call(
        "runs/beat",
        json!({"agent_id": agent, "beats": [{"run_id": b, "timeout_ms": 5000}]}),
    )
    .await;
    assert_eq!(beaten["canceling"], json!([b]), "{beaten}");
    let (_, done) = call("finish", finish(&agent, b, "CANCELED")).await;
    assert_eq!(done["finished"], json!([b]), "{done}");
    let view = s.wait_plan(plan_id, PlanStatus::Canceled).await;
    assert_eq!(view.tasks[1].status, TaskStatus::Canceled);

    // Bad input is named, and changes nothing.
    for (path, body, field) in [
        ("take", take(&agent, 0, 0), "slots"),
        ("take", take(&agent, 1, 3_600_000), "wait_ms"),
        (
            "runs/log",
            json!({"agent_id": agent, "run_id": a, "lines": [
                {"at_ms_ago": 0, "stream": "stdin", "line": "x"}]}),
            "lines[0].stream",
        ),
        (
            "runs/beat",
            json!({"agent_id": agent, "beats": [{"run_id": a, "timeout_ms": 0}]}),
            "beats[0].timeout_ms",
        ),
        ("hello", hello(json!(["a,b"])), ""),
    ] {
        let (status, body) = call(path, body).await;
        if field.is_empty() {
            assert!(status == 403 || status == 422, "{path}: {status} {body}");
        } else {
            assert_eq!(
                (status, body["field"].as_str()),
                (422, Some(field)),
                "{path}: {body}"
            );
        }
    }

    let (status, _) = call("bye", json!({"agent_id": agent})).await;
    assert_eq!(status, 204);
    let rows: Vec<ReplicaView> = s.get("/api/v1/replicas").await;
    assert!(rows.iter().all(|r| r.replica_id != agent), "{rows:?}");
}
