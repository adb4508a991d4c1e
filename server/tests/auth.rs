//! Authentication and roles over real HTTP (docs/design.md,
//! "Authorization"): API credentials, dashboard sessions, viewer and
//! operator rights, cross-site refusals, and the loopback-only rule of a
//! server without users.

mod common;

use baton::auth::{hash_password, new_token, token_hash};
use baton::cli::Cli;
use clap::Parser;
use domain::model::{PlanList, PlanView, RunView, TaskStatus};
use std::sync::Arc;

use common::server::Server;
use common::{Kind, TestDb};
use reqwest::{RequestBuilder, StatusCode, header};
use serde_json::{Value, json};

per_backend!(cases:
    the_api_wants_credentials_and_only_operators_change_things,
    only_operators_approve_and_brake_and_two_person_needs_another,
    dashboard_gates_are_for_operators_and_refusals_say_why,
    dashboard_sessions_sign_in_and_out,
    path_tricks_never_reach_a_page_or_the_api,
    exports_are_for_operators_and_definitions_hide_secrets,
);

/// A server with an operator (alice) and a viewer (victor), each with a
/// password and an API token.
struct WithUsers {
    server: Server,
    alice_token: String,
    victor_token: String,
    /// A client that does not follow redirects, to see them.
    browser: reqwest::Client,
    users_file: std::path::PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl WithUsers {
    async fn start(kind: Kind) -> Self {
        WithUsers::start_on(Arc::new(TestDb::new(kind).await), &[]).await
    }

    /// A replica on `db` with the same two users, and `args`.
    async fn start_on(db: Arc<TestDb>, args: &[&str]) -> Self {
        let (alice_token, victor_token) = (new_token().unwrap(), new_token().unwrap());
        let users = format!(
            "users:\n\
             - {{name: alice, role: operator, password_hash: '{}', token_hashes: ['{}']}}\n\
             - {{name: victor, role: viewer, password_hash: '{}', token_hashes: ['{}']}}\n",
            hash_password("alice-pw").unwrap(),
            token_hash(&alice_token).to_text(),
            hash_password("victor-pw").unwrap(),
            token_hash(&victor_token).to_text(),
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.yaml");
        std::fs::write(&path, users).unwrap();
        let mut with = WithUsers::on_file(db, path, alice_token, victor_token, args).await;
        with._dir = Some(dir);
        with
    }

    /// Another replica on `db` that reads this one's users file, as
    /// replicas sharing one file do.
    async fn beside(&self, db: Arc<TestDb>, args: &[&str]) -> Self {
        let (alice, victor) = (self.alice_token.clone(), self.victor_token.clone());
        WithUsers::on_file(db, self.users_file.clone(), alice, victor, args).await
    }

    async fn on_file(
        db: Arc<TestDb>,
        users_file: std::path::PathBuf,
        alice_token: String,
        victor_token: String,
        args: &[&str],
    ) -> Self {
        let mut all = vec!["--users-file", users_file.to_str().unwrap()];
        all.extend_from_slice(args);
        let server = Server::start_on(db, &all).await;
        WithUsers {
            server,
            alice_token,
            victor_token,
            browser: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            users_file,
            _dir: None,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.base)
    }

    /// This server's own origin, as its pages' requests carry it.
    fn origin(&self) -> &str {
        &self.server.base
    }

    async fn plan_count(&self) -> i64 {
        let list: PlanList = self
            .server
            .store
            .plan_list(None, None, 10, 0)
            .await
            .unwrap();
        list.total
    }

    /// A GET as a browser sends it, with the session cookie if any.
    async fn page(&self, path: &str, cookie: Option<&str>) -> reqwest::Response {
        let mut request = self.browser.get(self.url(path));
        if let Some(cookie) = cookie {
            request = request.header(header::COOKIE, cookie);
        }
        request.send().await.unwrap()
    }

    /// A form post from a page of `origin`, as the dashboard's scripts
    /// send it (JSON answers wanted).
    async fn form(
        &self,
        path: &str,
        cookie: Option<&str>,
        origin: &str,
        fields: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut request = self
            .browser
            .post(self.url(path))
            .header(header::ORIGIN, origin)
            .header(header::ACCEPT, "application/json")
            .form(fields);
        if let Some(cookie) = cookie {
            request = request.header(header::COOKIE, cookie);
        }
        request.send().await.unwrap()
    }

    /// Signs in through the form; the session cookie.
    async fn sign_in(&self, name: &str, password: &str) -> String {
        let fields = [("name", name), ("password", password), ("next", "/plans")];
        let r = self.form("/auth/login", None, self.origin(), &fields).await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        assert_eq!(location(&r), "/plans");
        let cookie = r.headers()[header::SET_COOKIE].to_str().unwrap().to_owned();
        for attribute in ["HttpOnly", "SameSite=Lax", "Path=/", "Max-Age=43200"] {
            assert!(cookie.contains(attribute), "{attribute} missing: {cookie}");
        }
        cookie.split(';').next().unwrap().to_owned()
    }
}

async fn answer(request: RequestBuilder) -> (StatusCode, Value) {
    let r = request.send().await.unwrap();
    (r.status(), r.json().await.unwrap_or(Value::Null))
}

/// The answer's error message holds `text`.
fn says(body: &Value, text: &str) {
    let error = body["error"].as_str().unwrap_or_default();
    assert!(error.contains(text), "{text:?} not in {body}");
}

/// A site that is not the dashboard.
const EVIL: &str = "https://evil.example";

fn location(r: &reqwest::Response) -> String {
    r.headers()[header::LOCATION].to_str().unwrap().to_owned()
}

/// Sends `GET path` byte for byte (HTTP clients resolve `..` before
/// sending, an attacker's `curl --path-as-is` does not); the status and
/// the whole answer.
async fn raw_get(base: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/html\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {answer}"));
    (status, answer)
}

/// Sends a POST's headers announcing a `content_length` body, and none of
/// the body; the status and the whole answer.
async fn raw_post_headers(
    base: &str,
    path: &str,
    headers: &[(&str, &str)],
    content_length: usize,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut request =
        format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {content_length}\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    // Read until the server closes, or stop once a whole answer is in:
    // its head and as much body as it declared.
    let whole = |answer: &[u8]| {
        let text = String::from_utf8_lossy(answer);
        let Some(end) = text.find("\r\n\r\n") else {
            return false;
        };
        let declared = text[..end].lines().find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        });
        declared.is_some_and(|n| answer.len() >= end + 4 + n)
    };
    let read = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
            if whole(&answer) {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), read).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {answer}"));
    (status, answer)
}

fn plan_body() -> Value {
    json!({"name": "guarded", "tasks": [
        {"name": "wait", "target": "t", "run_at": "2999-01-01T00:00:00Z", "sleep": "0s"}
    ]})
}

mod cases {
    use super::*;

    /// A plan's export holds its secrets, so only operators read it (API
    /// and the dashboard's "Submit again"); the definitions everyone sees
    /// (plan definition, run, plan page) hold none, and an export submits
    /// the plan again.
    pub async fn exports_are_for_operators_and_definitions_hide_secrets(kind: Kind) {
        let w = WithUsers::start(kind).await;
        let http = reqwest::Client::new();
        let (status, body) = answer(
            http.post(w.url("/api/v1/plans"))
                .bearer_auth(&w.alice_token)
                .json(&json!({"name": "secretive", "tasks": [
                    {"name": "migrate", "target": "db/orders", "version": "0042",
                     "command": {"argv": ["sh", "-c", "exit 0"], "env": {"PGPASSWORD": "s3cret-env"}}},
                ], "webhooks": [{"url": "https://chat.example/h", "secret": "s3cret-hook"}]})),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let plan: PlanView = serde_json::from_value(body).unwrap();
        let run = plan.tasks[0].run_id.unwrap();
        let secrets = ["s3cret-env", "s3cret-hook"];
        let export = w.url(&format!("/api/v1/plans/{}/export", plan.id));

        // What a viewer may read names the variable, never its value.
        for path in [
            format!("/api/v1/plans/{}/definition", plan.id),
            format!("/api/v1/runs/{run}"),
        ] {
            let (status, body) = answer(http.get(w.url(&path)).bearer_auth(&w.victor_token)).await;
            assert_eq!(status, StatusCode::OK, "{path}: {body}");
            let text = body.to_string();
            assert!(text.contains("PGPASSWORD"), "{path}: {text}");
            assert!(!secrets.iter().any(|s| text.contains(s)), "{path}: {text}");
        }
        let run_view: RunView = serde_json::from_value(
            answer(
                http.get(w.url(&format!("/api/v1/runs/{run}")))
                    .bearer_auth(&w.victor_token),
            )
            .await
            .1,
        )
        .unwrap();
        assert_eq!(run_view.definition.unwrap().task_name, "migrate");

        // The export: 403 for a viewer, the whole file for an operator.
        let (status, body) = answer(http.get(&export).bearer_auth(&w.victor_token)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        says(&body, "victor is a viewer");
        let (status, file) = answer(http.get(&export).bearer_auth(&w.alice_token)).await;
        assert_eq!(status, StatusCode::OK, "{file}");
        assert!(
            secrets.iter().all(|s| file.to_string().contains(s)),
            "{file}"
        );
        for (query, field) in [("?format=xml", "format"), ("?fromat=yaml", "fromat")] {
            let (status, body) = answer(
                http.get(format!("{export}{query}"))
                    .bearer_auth(&w.alice_token),
            )
            .await;
            assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{query}: {body}");
            assert_eq!(body["field"], field, "{body}");
        }
        let missing = w.url("/api/v1/plans/999999/export");
        let (status, _) = answer(http.get(&missing).bearer_auth(&w.alice_token)).await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        // The YAML export, submitted as it is, makes the same plan again.
        let yaml = http
            .get(format!("{export}?format=yaml"))
            .bearer_auth(&w.alice_token)
            .send()
            .await
            .unwrap();
        assert_eq!(yaml.headers()[header::CONTENT_TYPE], "application/yaml");
        let yaml = yaml.text().await.unwrap();
        let (status, body) = answer(
            http.post(w.url("/api/v1/plans"))
                .bearer_auth(&w.alice_token)
                .header(header::CONTENT_TYPE, "application/yaml")
                .body(yaml.clone()),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{yaml}\n{body}");
        let again: PlanView = serde_json::from_value(body).unwrap();
        assert_eq!(again.tasks[0].version.as_deref(), Some("0042"));
        let (_, file_again) = answer(
            http.get(w.url(&format!("/api/v1/plans/{}/export", again.id)))
                .bearer_auth(&w.alice_token),
        )
        .await;
        assert_eq!(file_again, file);

        // The dashboard: the plan page shows the definition to both, the
        // copy to submit again only to the operator.
        let viewer = w.sign_in("victor", "victor-pw").await;
        let operator = w.sign_in("alice", "alice-pw").await;
        let plan_page = format!("/plans/{}", plan.id);
        let copy_page = format!("/plans/new?from={}", plan.id);
        for (cookie, operator_page) in [(&viewer, false), (&operator, true)] {
            let page = w.page(&plan_page, Some(cookie)).await.text().await.unwrap();
            assert!(page.contains("PGPASSWORD (values hidden)"), "{page}");
            assert!(!secrets.iter().any(|s| page.contains(s)));
            assert_eq!(
                page.contains(&format!("href=\"{copy_page}\"")),
                operator_page
            );
            let copy = w.page(&copy_page, Some(cookie)).await.text().await.unwrap();
            assert_eq!(copy.contains("s3cret-env"), operator_page, "{copy}");
            assert_eq!(copy.contains("submit-viewer"), !operator_page, "{copy}");
        }
        // The page's server function refuses a viewer too.
        let r = w
            .form(
                "/_fn/export_plan",
                Some(&viewer),
                w.origin(),
                &[("id", &plan.id.to_string())],
            )
            .await;
        let text = r.text().await.unwrap();
        assert!(!text.contains("s3cret-env"), "{text}");
        assert!(text.contains("victor is a viewer"), "{text}");

        // Reading a plan's secrets leaves a trace: each export an operator
        // read (JSON, YAML, the dashboard's copy) is in the audit log, and
        // nothing for the refused viewer or the missing plan.
        let (status, log) = answer(
            http.get(w.url("/api/v1/audit?action=plan.export&limit=100"))
                .bearer_auth(&w.alice_token),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{log}");
        let entries = log["entries"].as_array().unwrap();
        assert!(
            entries
                .iter()
                .all(|e| e["actor"] == "alice" && e["outcome"] == "done"),
            "{log}"
        );
        let of_plan = entries.iter().filter(|e| e["plan_id"] == plan.id).count();
        assert!(of_plan >= 3, "{log}");
        let of_again = entries.iter().filter(|e| e["plan_id"] == again.id).count();
        assert_eq!(of_again, 1, "{log}");
    }

    pub async fn only_operators_approve_and_brake_and_two_person_needs_another(kind: Kind) {
        let w = WithUsers::start(kind).await;
        let http = &w.server.http;
        let (status, body) = answer(
            http.post(w.url("/api/v1/plans"))
                .bearer_auth(&w.alice_token)
                .json(&json!({"name": "gated", "tasks": [
                    {"name": "drop-column", "target": "db/orders", "sleep": "0s",
                        "approval": "two-person"}]})),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let plan: PlanView = serde_json::from_value(body).unwrap();
        let task = plan.tasks[0].id;
        let approve = w.url(&format!("/api/v1/tasks/{task}/approve"));
        let before = w.server.store.plan_get(plan.id).await.unwrap();
        let me = w.server.store.replica_list().await.unwrap()[0]
            .info
            .replica_id
            .clone();
        // A viewer may not approve, pause, set a capacity or drain.
        for (url, body) in [
            (approve.clone(), None),
            (w.url(&format!("/api/v1/replicas/{me}/drain")), None),
            (w.url(&format!("/api/v1/plans/{}/approve", plan.id)), None),
            (w.url(&format!("/api/v1/plans/{}/pause", plan.id)), None),
            (
                w.url("/api/v1/targets/pause"),
                Some(json!({"target": "db/orders"})),
            ),
            (
                w.url("/api/v1/targets/capacity"),
                Some(json!({"target": "db/orders", "capacity": 1})),
            ),
            (
                w.url("/api/v1/runs/bulk"),
                Some(json!({"action": "cancel", "filter": {"target": "db/"}, "expected": 1})),
            ),
            (
                w.url("/api/v1/plans/bulk"),
                Some(json!({"action": "cancel", "filter": {"name": "gated"}, "expected": 1})),
            ),
        ] {
            let mut request = http.post(&url).bearer_auth(&w.victor_token);
            if let Some(body) = body {
                request = request.json(&body);
            }
            let (status, body) = answer(request).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{url}: {body}");
            says(&body, "victor is a viewer");
        }
        // Nor create, change, trigger or delete a schedule: 403, nothing
        // stored or changed.
        let schedule = json!({"name": "nightly", "cron": "@daily",
            "plan": {"name": "n", "tasks": [{"name": "a", "target": "t", "sleep": "0s"}]}});
        let (status, body) = answer(
            http.post(w.url("/api/v1/schedules"))
                .bearer_auth(&w.victor_token)
                .json(&schedule),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert!(w.server.store.schedule_list().await.unwrap().is_empty());
        let (status, body) = answer(
            http.post(w.url("/api/v1/schedules"))
                .bearer_auth(&w.alice_token)
                .json(&schedule),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let id = body["id"].as_i64().unwrap();
        for verb in ["pause", "trigger"] {
            let url = w.url(&format!("/api/v1/schedules/{id}/{verb}"));
            let (status, body) = answer(http.post(&url).bearer_auth(&w.victor_token)).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{verb}: {body}");
        }
        let url = w.url(&format!("/api/v1/schedules/{id}"));
        let (status, _) = answer(http.delete(&url).bearer_auth(&w.victor_token)).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let kept = w.server.store.schedule_get(id).await.unwrap();
        assert!(kept.paused_by.is_none() && kept.plans.is_empty());
        // Nor may an operator act on every plan by leaving the filter out.
        let (status, body) = answer(
            http.post(w.url("/api/v1/plans/bulk"))
                .bearer_auth(&w.alice_token)
                .json(&json!({"action": "cancel", "filter": {}, "expected": 1})),
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_eq!(body["field"], "filter");
        // The submitter may not be the second person.
        let (status, body) = answer(http.post(&approve).bearer_auth(&w.alice_token)).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        says(&body, "alice submitted the plan");
        // Nothing changed (the waiting cause may move on: the scheduler runs).
        let after = w.server.store.plan_get(plan.id).await.unwrap();
        assert_eq!(after.paused_by, None);
        assert_eq!(after.tasks[0].approved_by, None);
        assert_eq!(after.tasks[0].status, before.tasks[0].status);
        assert!(
            w.server.store.target_list().await.unwrap()[0]
                .paused_by
                .is_none()
        );
        assert!(
            !w.server
                .store
                .replicas_draining()
                .await
                .unwrap()
                .contains(&me)
        );
        // The operator may pause and resume.
        let pause = w.url(&format!("/api/v1/plans/{}/pause", plan.id));
        let (status, body) = answer(http.post(&pause).bearer_auth(&w.alice_token)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["paused_by"], "alice");
        let (status, body) = answer(http.post(&pause).bearer_auth(&w.alice_token)).await;
        assert_eq!(status, StatusCode::CONFLICT);
        says(&body, "already paused by alice");
    }

    /// The dashboard's approve, pause and target forms: a viewer's session
    /// is refused as for every other action, and the engine's refusals
    /// reach the operator in its words with their own status, not as a
    /// server fault.
    pub async fn dashboard_gates_are_for_operators_and_refusals_say_why(kind: Kind) {
        let w = WithUsers::start(kind).await;
        let own = w.origin().to_owned();
        let (status, body) = answer(
            w.server
                .http
                .post(w.url("/api/v1/plans"))
                .bearer_auth(&w.alice_token)
                .json(&json!({"name": "gated", "tasks": [
                    {"name": "drop-column", "target": "db/orders", "sleep": "0s",
                        "approval": "two-person"}]})),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let plan: PlanView = serde_json::from_value(body).unwrap();
        let (plan_id, task) = (plan.id.to_string(), plan.tasks[0].id.to_string());
        let store = &w.server.store;
        let viewer = w.sign_in("victor", "victor-pw").await;
        let operator = w.sign_in("alice", "alice-pw").await;

        // The menu offers Submit to operators only.
        for (cookie, offered) in [(&viewer, false), (&operator, true)] {
            let page = w.page("/plans", Some(cookie)).await.text().await.unwrap();
            assert!(
                page.contains(r#"<nav aria-label="Main""#),
                "the menu is there"
            );
            let submit = page.contains(r#"href="/plans/new""#);
            assert_eq!(submit, offered, "a link to Submit for an operator only");
        }
        // A search of FAILED runs offers Retry and Skip all, not Cancel all
        // (it could change none of them); one of RUNNING runs only Cancel.
        for (search, offered) in [
            ("status=FAILED", ["retry", "skip"]),
            ("status=RUNNING", ["cancel", "cancel"]),
        ] {
            let path = format!("/runs?{search}");
            let page = w.page(&path, Some(&operator)).await.text().await.unwrap();
            for action in ["retry", "cancel", "skip"] {
                let shown = page.contains(&format!(r#"data-bulk="{action}""#));
                assert_eq!(shown, offered.contains(&action), "{search} {action}");
            }
        }

        let me = store.replica_list().await.unwrap()[0]
            .info
            .replica_id
            .clone();
        let drain = [("kind", "drain"), ("worker", me.as_str())];
        let pause_plan = [("kind", "plan_pause"), ("id", plan_id.as_str())];
        let approve = [("kind", "task_approve"), ("id", task.as_str())];
        let pause_target = [("kind", "pause"), ("target", "db/orders")];
        let capacity = |c: &'static str| {
            [
                ("kind", "capacity"),
                ("target", "db/orders"),
                ("capacity", c),
            ]
        };
        for (path, fields) in [
            ("/_fn/act", &pause_plan[..]),
            ("/_fn/act", &approve[..]),
            ("/_fn/target_act", &pause_target[..]),
            ("/_fn/target_act", &capacity("2")[..]),
            ("/_fn/worker_act", &drain[..]),
        ] {
            let r = w.form(path, Some(&viewer), &own, fields).await;
            assert_eq!(r.status(), StatusCode::FORBIDDEN, "{path} {fields:?}");
            let text = r.text().await.unwrap();
            assert!(text.contains("victor is a viewer"), "{text}");
        }
        // (The promoter may have written the task's waiting cause since.)
        let after = store.plan_get(plan.id).await.unwrap();
        assert_eq!(after.paused_by, None);
        assert_eq!(after.tasks[0].approved_by, None);
        let target = || async { store.target_list().await.unwrap().remove(0) };
        assert_eq!(
            (target().await.paused_by, target().await.capacity),
            (None, None)
        );
        assert!(!store.replicas_draining().await.unwrap().contains(&me));
        // The Replicas page offers Drain to operators only (disabled for
        // the viewer, with the reason).
        for (cookie, enabled) in [(&viewer, false), (&operator, true)] {
            let page = w
                .page("/replicas", Some(cookie))
                .await
                .text()
                .await
                .unwrap();
            assert!(page.contains(r#"data-action="drain""#), "a Drain button");
            assert_eq!(
                page.contains("Only operators can do this"),
                !enabled,
                "the viewer's Drain is disabled"
            );
        }

        // The submitter may not be the second person: 403 in the engine's words.
        let r = w.form("/_fn/act", Some(&operator), &own, &approve).await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        let text = r.text().await.unwrap();
        assert!(text.contains("alice submitted the plan"), "{text}");
        // A capacity out of range is the sender's mistake, as is one that
        // is not a number.
        let r = w
            .form("/_fn/target_act", Some(&operator), &own, &capacity("0"))
            .await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let text = r.text().await.unwrap();
        assert!(text.contains("capacity must be between 1 and"), "{text}");
        let r = w
            .form("/_fn/target_act", Some(&operator), &own, &capacity("two"))
            .await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert!(r.text().await.unwrap().contains("whole number"));

        // The operator's own forms apply, under their name.
        for (path, fields) in [
            ("/_fn/act", &pause_plan[..]),
            ("/_fn/target_act", &pause_target[..]),
            ("/_fn/target_act", &capacity(" 2 ")[..]),
        ] {
            let r = w.form(path, Some(&operator), &own, fields).await;
            assert!(r.status().is_success(), "{path} {fields:?}: {}", r.status());
        }
        assert_eq!(
            store.plan_get(plan.id).await.unwrap().paused_by.as_deref(),
            Some("alice")
        );
        let t = target().await;
        assert_eq!(
            (t.paused_by.as_deref(), t.capacity),
            (Some("alice"), Some(2))
        );
        // Pausing twice is refused with what already holds it.
        let r = w
            .form("/_fn/target_act", Some(&operator), &own, &pause_target)
            .await;
        assert_eq!(r.status(), StatusCode::CONFLICT);
        assert!(r.text().await.unwrap().contains("already paused by alice"));
        let r = w
            .form("/_fn/target_act", Some(&operator), &own, &capacity(""))
            .await;
        assert!(r.status().is_success(), "{}", r.status());
        assert_eq!(target().await.capacity, None, "empty removes the capacity");

        // The operator drains the replica; twice is refused saying so; a
        // worker that is not there is named.
        let r = w
            .form("/_fn/worker_act", Some(&operator), &own, &drain)
            .await;
        assert!(r.status().is_success(), "{}", r.status());
        assert!(store.replicas_draining().await.unwrap().contains(&me));
        let r = w
            .form("/_fn/worker_act", Some(&operator), &own, &drain)
            .await;
        assert_eq!(r.status(), StatusCode::CONFLICT);
        assert!(r.text().await.unwrap().contains("already draining"));
        let nobody = [("kind", "resume"), ("worker", "r-nobody")];
        let r = w
            .form("/_fn/worker_act", Some(&operator), &own, &nobody)
            .await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert!(r.text().await.unwrap().contains("r-nobody"));
        let resume = [("kind", "resume"), ("worker", me.as_str())];
        let r = w
            .form("/_fn/worker_act", Some(&operator), &own, &resume)
            .await;
        assert!(r.status().is_success(), "{}", r.status());
        assert!(!store.replicas_draining().await.unwrap().contains(&me));
    }

    pub async fn the_api_wants_credentials_and_only_operators_change_things(kind: Kind) {
        let w = WithUsers::start(kind).await;
        let http = &w.server.http;
        let plans = w.url("/api/v1/plans");

        // Health checks stay open for load balancers.
        for probe in ["/healthz", "/readyz"] {
            let r = http.get(w.url(probe)).send().await.unwrap();
            assert_eq!(r.status(), StatusCode::OK, "{probe}");
        }

        // No credentials: 401 with both challenges and a hint.
        let r = http.get(&plans).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        let challenge = r.headers()[header::WWW_AUTHENTICATE].to_str().unwrap();
        assert!(
            challenge.contains("Bearer") && challenge.contains("Basic"),
            "{challenge}"
        );
        let body: Value = r.json().await.unwrap();
        says(&body, "Authorization: Bearer");
        let (status, _) = answer(http.get(w.url("/metrics"))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "/metrics is not public");

        // Wrong credentials of each kind say what is wrong.
        let (status, body) = answer(http.get(&plans).bearer_auth("baton_nope")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        says(&body, "token is not known");
        let (status, body) = answer(http.get(&plans).basic_auth("alice", Some("wrong"))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        says(&body, "wrong user name or password");
        let (status, _) = answer(http.get(&plans).basic_auth("nobody", Some("alice-pw"))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        let (status, body) =
            answer(http.get(&plans).header(header::AUTHORIZATION, "Digest x")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        says(&body, "`Digest` is not supported");

        // A viewer reads, by token or password, but changes nothing.
        let (status, _) = answer(http.get(&plans).bearer_auth(&w.victor_token)).await;
        assert_eq!(status, StatusCode::OK);
        let (status, _) = answer(
            http.get(w.url("/metrics"))
                .basic_auth("victor", Some("victor-pw")),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        let (status, body) = answer(
            http.post(&plans)
                .bearer_auth(&w.victor_token)
                .json(&plan_body()),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        says(&body, "victor is a viewer");
        assert_eq!(w.plan_count().await, 0, "a refused submit stores nothing");

        // An operator submits by password; the plan records who did.
        let (status, body) = answer(
            http.post(&plans)
                .basic_auth("alice", Some("alice-pw"))
                .json(&plan_body()),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let plan: PlanView = serde_json::from_value(body).unwrap();
        let task = &plan.tasks[0];
        let run_id = task.run_id.unwrap();

        // The viewer cannot cancel; the operator can, by token, and the
        // event names the operator.
        let cancel = w.url(&format!("/api/v1/tasks/{}/cancel", task.id));
        let (status, _) = answer(http.post(&cancel).bearer_auth(&w.victor_token)).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let run = w.server.store.run_get(run_id).await.unwrap();
        assert_eq!(run.events.len(), 1, "the viewer's cancel changed nothing");
        assert_eq!(run.events[0].actor, "alice", "the submit is alice's");

        // A browser on another site cannot use the operator's credentials.
        let (status, body) = answer(
            http.post(&cancel)
                .bearer_auth(&w.alice_token)
                .header(header::ORIGIN, EVIL),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        says(&body, "https://evil.example");

        let (status, body) = answer(http.post(&cancel).bearer_auth(&w.alice_token)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let plan: PlanView = serde_json::from_value(body).unwrap();
        assert_eq!(plan.tasks[0].status, TaskStatus::Canceled);
        let run = w.server.store.run_get(run_id).await.unwrap();
        let last = run.events.last().unwrap();
        assert_eq!(last.actor, "alice", "{last:?}");

        // Guessing: after 10 wrong passwords the name is paused, even for
        // the right one, unless that checked out in the last ten minutes
        // (a script's Basic auth is not locked out by someone guessing);
        // its token and other names are not. Thirty sent at once get 10
        // checks, not 30: a check counts from its start.
        let burst = futures_util::future::join_all(
            (0..30).map(|_| answer(http.get(&plans).basic_auth("victor", Some("guess")))),
        )
        .await;
        let count = |code| burst.iter().filter(|(status, _)| *status == code).count();
        assert_eq!(
            (
                count(StatusCode::UNAUTHORIZED),
                count(StatusCode::TOO_MANY_REQUESTS)
            ),
            (10, 20)
        );
        let (status, _) = answer(http.get(&plans).basic_auth("victor", Some("victor-pw"))).await;
        assert_eq!(status, StatusCode::OK, "checked earlier in this test");
        let r = http
            .get(&plans)
            .basic_auth("victor", Some("victor-pw "))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(r.headers().contains_key(header::RETRY_AFTER));
        says(
            &r.json().await.unwrap(),
            "too many wrong passwords for `victor`",
        );
        let (status, _) = answer(http.get(&plans).bearer_auth(&w.victor_token)).await;
        assert_eq!(status, StatusCode::OK, "tokens are not throttled");
        let (status, _) = answer(http.get(&plans).basic_auth("alice", Some("alice-pw"))).await;
        assert_eq!(status, StatusCode::OK);
    }

    pub async fn dashboard_sessions_sign_in_and_out(kind: Kind) {
        let w = WithUsers::start(kind).await;
        let own = w.origin().to_owned();

        // Pages send strangers to the sign-in page, and back afterwards.
        let r = w.page("/plans?status=FAILED", None).await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        assert_eq!(location(&r), "/login?next=/plans%3Fstatus%3DFAILED");
        let r = w.page("/login", None).await;
        assert_eq!(r.status(), StatusCode::OK, "the sign-in page is public");

        // A wrong password sets no cookie and says so on the page.
        let wrong = [("name", "victor"), ("password", "nope"), ("next", "/plans")];
        let r = w.form("/auth/login", None, &own, &wrong).await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        assert_eq!(location(&r), "/login?failed=1&next=/plans");
        assert!(r.headers().get(header::SET_COOKIE).is_none());

        // Signing in from another site is refused (login CSRF).
        let right = [("name", "victor"), ("password", "victor-pw")];
        let r = w.form("/auth/login", None, EVIL, &right).await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN);

        let viewer = w.sign_in("victor", "victor-pw").await;
        let r = w.page("/plans", Some(&viewer)).await;
        assert_eq!(r.status(), StatusCode::OK);

        // The operator submits; the viewer's session cannot act on it.
        let operator = w.sign_in("alice", "alice-pw").await;
        let plan_file = "name: from-the-dashboard\ntasks:\n  - {name: a, target: t, run_at: '2999-01-01T00:00:00Z', sleep: 0s}";
        let r = w
            .form(
                "/_fn/submit_plan",
                Some(&operator),
                &own,
                &[("plan", plan_file)],
            )
            .await;
        assert!(r.status().is_success(), "{}", r.status());
        assert_eq!(w.plan_count().await, 1);
        let store = &w.server.store;
        let plan = store.plan_list(None, None, 1, 0).await.unwrap().plans[0].id;
        let task = store.plan_get(plan).await.unwrap().tasks[0].id.to_string();
        let cancel = [("kind", "task_cancel"), ("id", task.as_str())];
        let r = w.form("/_fn/act", Some(&viewer), &own, &cancel).await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "not a server fault");
        let text = r.text().await.unwrap();
        assert!(text.contains("victor is a viewer"), "{text}");
        // An invalid plan is the sender's mistake, with its field; an
        // oversized one is refused before it is read.
        let r = w
            .form(
                "/_fn/submit_plan",
                Some(&operator),
                &own,
                &[("plan", "name: p\ntasks: []")],
            )
            .await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert!(r.text().await.unwrap().contains("at least one task"));
        // Only the headers are sent: the server answers at once, before
        // any of the body (which it then reads and drops beside the
        // answer, so a client still writing sees the answer, not a
        // broken pipe).
        let (status, answer) = raw_post_headers(
            &w.server.base,
            "/_fn/submit_plan",
            &[
                ("Cookie", operator.as_str()),
                ("Origin", own.as_str()),
                ("Accept", "application/json"),
                ("Content-Type", "application/x-www-form-urlencoded"),
            ],
            baton::plan::limits::MAX_PLAN_BODY_BYTES + 1,
        )
        .await;
        assert_eq!(status, 413, "{answer}");
        // As the dashboard's own error, which the submit page shows.
        let body = &answer[answer.find("\r\n\r\n").expect("a body") + 4..];
        match serde_json::from_str::<app::error::DashboardError>(body) {
            Ok(app::error::DashboardError::Invalid { message, .. }) => {
                assert!(message.contains("MiB"), "{message}")
            }
            other => panic!("{other:?} in {answer}"),
        }
        assert_eq!(w.plan_count().await, 1, "nothing refused was stored");
        // Nor can a page on another site act with the operator's cookie.
        let r = w.form("/_fn/act", Some(&operator), EVIL, &cancel).await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        let status = || async { store.plan_get(plan).await.unwrap().tasks[0].status };
        assert_eq!(status().await, TaskStatus::Pending);
        let r = w.form("/_fn/act", Some(&operator), &own, &cancel).await;
        assert!(r.status().is_success(), "{}", r.status());
        assert_eq!(status().await, TaskStatus::Canceled);
        let run = store.plan_get(plan).await.unwrap().tasks[0].run_id.unwrap();
        let events = store.run_get(run).await.unwrap().events;
        assert!(events.iter().all(|e| e.actor == "alice"), "{events:?}");

        // Signing out ends the session on the server, not just the cookie,
        // and a live feed it opened (which answers as long as the tab is open).
        let mut feed = w.page("/live/overview", Some(&viewer)).await;
        assert_eq!(feed.status(), StatusCode::OK);
        assert!(feed.chunk().await.unwrap().is_some(), "the first view");
        let r = w.form("/auth/logout", Some(&viewer), &own, &[]).await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        assert_eq!(location(&r), "/login");
        let cleared = r.headers()[header::SET_COOKIE].to_str().unwrap();
        assert!(cleared.contains("Max-Age=0"), "{cleared}");
        let r = w.page("/plans", Some(&viewer)).await;
        assert_eq!(
            r.status(),
            StatusCode::SEE_OTHER,
            "the old cookie no longer works"
        );
        let ended = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            while feed.chunk().await.unwrap().is_some() {}
        })
        .await;
        assert!(ended.is_ok(), "the feed went on after its session ended");
        // Signing out again with the dead cookie still just signs out.
        let r = w.form("/auth/logout", Some(&viewer), &own, &[]).await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        assert_eq!(location(&r), "/login");
        let r = w.form("/_fn/plans", Some(&viewer), &own, &[]).await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert!(r.text().await.unwrap().contains("session has ended"));

        // The audit log has each sign-in, the wrong password, the
        // dashboard's changes and the sign-out, each from this client's
        // address; a viewer may read it. Refusals at the door (another
        // site's form, a viewer's button) reached no action and are not
        // there; the second sign-out ended nothing.
        let (status, log) = super::answer(
            w.browser
                .get(w.url("/api/v1/audit"))
                .bearer_auth(&w.victor_token),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{log}");
        let got: Vec<(String, String, String)> = log["entries"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .map(|e| {
                assert_eq!(e["address"], "127.0.0.1", "{e}");
                let text = |k: &str| e[k].as_str().unwrap().to_owned();
                (text("action"), text("actor"), text("outcome"))
            })
            .collect();
        let want = [
            ("auth.sign_in_failed", "victor", "refused"),
            ("auth.sign_in", "victor", "done"),
            ("auth.sign_in", "alice", "done"),
            ("plan.submit", "alice", "done"),
            ("task.cancel", "alice", "done"),
            ("auth.sign_out", "victor", "done"),
        ];
        let want: Vec<(String, String, String)> = want
            .iter()
            .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
            .collect();
        assert_eq!(got, want, "{log}");
        let failed = &log["entries"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(failed["detail"], "wrong user name or password");
    }

    /// `/pkg/` and the other public paths must not be a door to the rest:
    /// every dot-segment trick, plain or encoded, on every kind of route,
    /// is refused before anything reads it.
    pub async fn path_tricks_never_reach_a_page_or_the_api(kind: Kind) {
        let w = WithUsers::start(kind).await;
        let (status, body) = answer(
            w.server
                .http
                .post(w.url("/api/v1/plans"))
                .bearer_auth(&w.alice_token)
                .json(&plan_body()),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let id = body["id"].as_i64().unwrap();
        let run = body["tasks"][0]["run_id"].as_i64().unwrap_or(1);
        let pages = [
            format!("plans/{id}"),
            format!("runs/{run}"),
            "plans".to_owned(),
            "replicas".to_owned(),
            "deliveries".to_owned(),
            String::new(),
            "api/v1/plans".to_owned(),
            format!("api/v1/plans/{id}"),
            "metrics".to_owned(),
            "_fn/plans".to_owned(),
        ];
        let doors = [
            "/pkg/../",
            "/pkg/%2e%2e/",
            "/pkg/%2E%2E/",
            "/pkg/.%2e/",
            "/pkg/x/../../",
            "/pkg/./../",
            "/pkg/..%2f",
            "/pkg/..%2F",
            "/pkg/..\\",
            "/pkg/..%5c",
            "/favicon.svg/../",
            "/login/../",
            "/healthz/../",
            "/readyz/%2e%2e/",
            "/auth/login/../../",
        ];
        for page in &pages {
            for door in doors {
                let path = format!("{door}{page}");
                let (status, answer) = raw_get(&w.server.base, &path).await;
                assert_eq!(status, 400, "{path}: {answer}");
                assert!(
                    !answer.contains("guarded"),
                    "{path} leaked the plan: {answer}"
                );
            }
        }
        // The doors themselves still work as they should.
        assert_eq!(raw_get(&w.server.base, "/healthz").await.0, 200);
        let (status, answer) = raw_get(&w.server.base, &format!("/plans/{id}")).await;
        assert_eq!(status, 303, "a page still wants a sign-in: {answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_users_only_loopback_is_served() {
    let s = Server::start(Kind::Sqlite).await;
    let plans = format!("{}/api/v1/plans", s.base);

    // Everyone on loopback is the anonymous operator.
    let (status, body) = answer(s.http.post(&plans).json(&plan_body())).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let run_id = body["tasks"][0]["run_id"].as_i64().unwrap();
    let run: RunView = s.get(&format!("/api/v1/runs/{run_id}")).await;
    assert_eq!(run.events[0].actor, "anonymous");

    // A name that only resolves to loopback (DNS rebinding) is refused.
    let (status, body) = answer(s.http.get(&plans).header(header::HOST, "evil.example:3000")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    says(&body, "only to loopback");
    let (status, _) = answer(s.http.get(&plans).header(header::HOST, "localhost:3000")).await;
    assert_eq!(status, StatusCode::OK);

    // A page on another site cannot submit through the dashboard's form
    // endpoint (it would run its commands here).
    let r = s
        .http
        .post(format!("{}/_fn/submit_plan", s.base))
        .header(header::ORIGIN, EVIL)
        .form(&[(
            "plan",
            "name: x\ntasks:\n  - {name: a, target: t, command: {argv: [touch, /tmp/pwned]}}",
        )])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let list: PlanList = s.get("/api/v1/plans").await;
    assert_eq!(list.total, 1, "nothing was stored");
}

#[test]
fn serve_refuses_to_listen_beyond_loopback_without_users() {
    let settings = |listen: &str| Cli::parse_from(["baton", "--listen", listen]).settings;
    let error = settings("0.0.0.0:3000")
        .check_listen_is_safe(None)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("0.0.0.0:3000") && error.contains("BATON_USERS_FILE"),
        "{error}"
    );
    assert!(settings("[::]:3000").check_listen_is_safe(None).is_err());
    assert!(
        settings("127.0.0.1:3000")
            .check_listen_is_safe(None)
            .is_ok()
    );
    assert!(settings("[::1]:3000").check_listen_is_safe(None).is_ok());
    let users = baton::auth::Users::parse(&format!(
        "users: [{{name: a, role: viewer, token_hashes: ['{}']}}]",
        token_hash("x").to_text()
    ))
    .unwrap();
    assert!(
        settings("0.0.0.0:3000")
            .check_listen_is_safe(Some(&users))
            .is_ok()
    );
}

/// Sessions live in the database: behind a load balancer a sign-in made on
/// one replica is good on every other, so the balancer needs no sticky
/// sessions (docs/deploy.md), and signing out on one ends it on all.
/// Two replicas on one PostgreSQL (SQLite serves one replica only), both
/// reached by the browser at the balancer's address.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sign_in_on_one_replica_is_good_on_another() {
    let db = Arc::new(TestDb::new(Kind::Postgres).await);
    let balancer = "http://baton.example:8080";
    let a = WithUsers::start_on(db.clone(), &["--public-url", balancer]).await;
    let b = a.beside(db.clone(), &["--public-url", balancer]).await;

    let operator = a.sign_in("alice", "alice-pw").await;
    let r = b.page("/plans", Some(&operator)).await;
    assert_eq!(r.status(), StatusCode::OK, "replica b knows a's session");

    // A change sent to b with the session made on a, from the dashboard
    // as the browser sees it (the balancer's origin).
    let plan_file = "name: across-replicas\ntasks:\n  - {name: a, target: t, run_at: '2999-01-01T00:00:00Z', sleep: 0s}";
    let r = b
        .form(
            "/_fn/submit_plan",
            Some(&operator),
            balancer,
            &[("plan", plan_file)],
        )
        .await;
    assert!(r.status().is_success(), "{}", r.status());
    let plans = a.server.store.plan_list(None, None, 10, 0).await.unwrap();
    assert_eq!(plans.total, 1);
    let plan = a.server.store.plan_get(plans.plans[0].id).await.unwrap();
    assert_eq!(plan.created_by, "alice", "the session's user, seen by b");

    // Signing out on b ends the session on a too.
    let r = b.form("/auth/logout", Some(&operator), balancer, &[]).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let r = a.page("/plans", Some(&operator)).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "a no longer takes it");
    assert_eq!(location(&r), "/login?next=/plans");

    // A new password for alice (a users file with new hashes) ends the
    // sessions made with the old one; the new one signs in.
    let alice = a.sign_in("alice", "alice-pw").await;
    assert_eq!(
        b.page("/plans", Some(&alice)).await.status(),
        StatusCode::OK
    );
    let renewed = WithUsers::start_on(db, &["--public-url", balancer]).await;
    let r = renewed.page("/plans", Some(&alice)).await;
    assert_eq!(
        r.status(),
        StatusCode::SEE_OTHER,
        "the old password's session"
    );
    let again = renewed.sign_in("alice", "alice-pw").await;
    let r = renewed.page("/plans", Some(&again)).await;
    assert_eq!(r.status(), StatusCode::OK);
}

/// A sign-in name longer than any user's is wrong at once: not counted
/// per name (1 MB names each kept a count, and grew a replica by tens of
/// megabytes a second), so it is never blocked as "too many" either, and
/// the users file refuses such a name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_longer_than_any_users_is_wrong_and_kept_nowhere() {
    let w = WithUsers::start(Kind::Sqlite).await;
    let plans = w.url("/api/v1/plans");
    let long = format!("alice{}", "x".repeat(100_000));
    for _ in 0..12 {
        let (status, body) =
            answer(w.server.http.get(&plans).basic_auth(&long, Some("wrong"))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    let (status, _) = answer(
        w.server
            .http
            .get(&plans)
            .basic_auth("alice", Some("alice-pw")),
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    let users = format!("users:\n  - {{name: {}, role: viewer}}\n", "n".repeat(201));
    let e = baton::auth::Users::parse(&users).unwrap_err();
    assert_eq!(e.field, "users[0].name");
    assert!(
        e.message.contains("at most 200 characters"),
        "{}",
        e.message
    );
}

/// Guesses under ever new names from one address are counted against the
/// address too: after 50 wrong checks in 15 minutes its password checks
/// pause, without Argon2 and without an audit entry each (a trial sent 40
/// a second under random names, slowed every page 4–7× and wrote an
/// entry per guess). Tokens are not affected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guesses_under_new_names_pause_their_address() {
    let db = Arc::new(TestDb::new(Kind::Sqlite).await);
    let w = WithUsers::start_on(db.clone(), &[]).await;
    let plans = w.url("/api/v1/plans");
    let mut statuses = Vec::new();
    for i in 0..55 {
        let request = w.server.http.get(&plans);
        let (status, body) = answer(request.basic_auth(format!("guess-{i}"), Some("x"))).await;
        statuses.push((status, body));
    }
    let checked = statuses
        .iter()
        .take_while(|(s, _)| *s == StatusCode::UNAUTHORIZED)
        .count();
    assert_eq!(checked, 50, "{:?}", statuses.last());
    for (status, body) in &statuses[50..] {
        assert_eq!(*status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        says(body, "too many wrong passwords from your address");
    }
    // The sign-in form from the same address: paused, and not recorded.
    let audited = || db.count("SELECT COUNT(*) FROM audit WHERE action = 'auth.sign_in_failed'");
    let before = audited().await;
    let fields = [("name", "guess-x"), ("password", "x"), ("next", "/plans")];
    let r = w.form("/auth/login", None, w.origin(), &fields).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(location(&r).contains("failed=too-many"), "{}", location(&r));
    assert_eq!(audited().await, before);
    let (status, _) = answer(w.server.http.get(&plans).bearer_auth(&w.alice_token)).await;
    assert_eq!(status, StatusCode::OK, "tokens are not throttled");
}

/// Behind a proxy named in `BATON_TRUSTED_PROXIES`, the client its
/// `X-Forwarded-For` names is counted, so one guesser behind the proxy
/// does not pause everyone's sign-in; from anyone else the header is not
/// believed (a guesser cannot dodge the count by writing one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_the_client_it_names_is_counted() {
    let db = Arc::new(TestDb::new(Kind::Sqlite).await);
    let proxied = WithUsers::start_on(db, &["--trusted-proxies", "127.0.0.1/8"]).await;
    let plans = proxied.url("/api/v1/plans");
    let from = |w: &WithUsers, client: &str| {
        w.server
            .http
            .get(w.url("/api/v1/plans"))
            .header("x-forwarded-for", client)
    };
    for i in 0..50 {
        let request = from(&proxied, "203.0.113.9").basic_auth(format!("guess-{i}"), Some("x"));
        assert_eq!(answer(request).await.0, StatusCode::UNAUTHORIZED);
    }
    let guesser = from(&proxied, "203.0.113.9").basic_auth("guess-x", Some("x"));
    assert_eq!(answer(guesser).await.0, StatusCode::TOO_MANY_REQUESTS);
    let colleague = from(&proxied, "198.51.100.7").basic_auth("alice", Some("alice-pw"));
    assert_eq!(answer(colleague).await.0, StatusCode::OK, "{plans}");

    // Not trusted: every guess counts against the peer, whatever it says.
    let direct = WithUsers::start(Kind::Sqlite).await;
    for i in 0..50 {
        let client = format!("198.51.100.{i}");
        let request = from(&direct, &client).basic_auth(format!("guess-{i}"), Some("x"));
        assert_eq!(answer(request).await.0, StatusCode::UNAUTHORIZED);
    }
    let dodging = from(&direct, "192.0.2.1").basic_auth("guess-y", Some("x"));
    assert_eq!(answer(dodging).await.0, StatusCode::TOO_MANY_REQUESTS);
}

/// Live feeds are bounded per user: one user at the bound is refused while
/// another still opens one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_users_live_feeds_leave_room_for_another() {
    let db = Arc::new(TestDb::new(Kind::Sqlite).await);
    let w = WithUsers::start_on(db, &["--live-max-per-user", "2"]).await;
    let open = |token: &str, view: &str| {
        w.server
            .http
            .get(w.url(&format!("/live/{view}")))
            .header(header::ACCEPT, "text/event-stream")
            .bearer_auth(token)
            .send()
    };
    let mut alices = Vec::new();
    for view in ["overview", "plans"] {
        let feed = open(&w.alice_token, view).await.unwrap();
        assert_eq!(feed.status(), StatusCode::OK);
        alices.push(feed);
    }
    let refused = open(&w.alice_token, "replicas").await.unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        refused
            .text()
            .await
            .unwrap()
            .contains("BATON_LIVE_MAX_PER_USER")
    );
    let victors = open(&w.victor_token, "replicas").await.unwrap();
    assert_eq!(
        victors.status(),
        StatusCode::OK,
        "another user is not held up"
    );
}

/// A user's flood waits its turn: with every slot one user may hold taken
/// by a request whose body never comes, that user's further requests wait
/// and past the bound are refused at once, while another user is served
/// at once and `/readyz` stays ready; when the slow client goes away its
/// slot serves the requests that waited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_users_flood_waits_its_turn_while_another_is_served() {
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;
    let db = Arc::new(TestDb::new(Kind::Sqlite).await);
    // Two slots: one user holds at most one.
    let args = ["--request-slots", "2", "--requests-per-user", "3"];
    let w = WithUsers::start_on(db, &args).await;
    let plans = w.url("/api/v1/plans");
    let alice = |path: &str| w.server.http.get(w.url(path)).bearer_auth(&w.alice_token);

    // Alice's submit announces a body and sends one byte of it: its
    // handler holds her slot, reading.
    let addr = w.server.base.trim_start_matches("http://").to_owned();
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /api/v1/plans HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{",
        w.alice_token
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    // Victor's /metrics (which holds the other slot while it is read).
    let metrics = || async {
        let r = w
            .server
            .http
            .get(w.url("/metrics"))
            .bearer_auth(&w.victor_token);
        r.send().await.unwrap().text().await.unwrap()
    };
    let has = |text: &str, line: &str| text.lines().any(|l| l == line);
    // Once the submit holds her slot…
    let started = std::time::Instant::now();
    while !has(&metrics().await, "baton_request_slots_held 2") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the slow submit holds a slot"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // …her next two wait (the second slot is free, but not hers to take).
    let mut waiting: Vec<_> = (0..2)
        .map(|_| tokio::spawn(alice("/api/v1/plans").send()))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for request in &waiting {
        assert!(!request.is_finished(), "alice's request waits its turn");
    }
    // A fourth is refused (after a pause that holds no slot), saying why.
    let refused = alice("/api/v1/plans").send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
    says(&refused.json().await.unwrap(), "BATON_REQUESTS_PER_USER");
    // Victor is served now, and the replica is ready.
    let victors = tokio::time::timeout(
        Duration::from_secs(5),
        answer(w.server.http.get(&plans).bearer_auth(&w.victor_token)),
    )
    .await
    .expect("another user is not held up");
    assert_eq!(victors.0, StatusCode::OK);
    let ready = w.server.http.get(w.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::OK);
    // /metrics shows it: alice's slot and victor's scrape, her two waiting,
    // her one refusal.
    let now = metrics().await;
    for line in [
        "baton_request_slots_held 2",
        "baton_requests_waiting 2",
        "baton_requests_refused_total 1",
    ] {
        assert!(has(&now, line), "{line} in {now}");
    }
    // Her page loads and her dashboard's calls are refused in the form
    // their readers take: a browser's page as text, a server function as
    // the dashboard's own error, which the page shows.
    let page = alice("/plans")
        .header(header::ACCEPT, "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(page.headers()[header::RETRY_AFTER], "1");
    let kind = page.headers()[header::CONTENT_TYPE].to_str().unwrap();
    assert!(kind.starts_with("text/plain"), "{kind}");
    let text = page.text().await.unwrap();
    assert!(text.contains("BATON_REQUESTS_PER_USER"), "{text}");
    let call = w
        .server
        .http
        .post(w.url("/_fn/act"))
        .bearer_auth(&w.alice_token)
        .header(header::ACCEPT, "application/json")
        .form(&[("kind", "plan_pause"), ("id", "1")])
        .send()
        .await
        .unwrap();
    assert_eq!(call.status(), StatusCode::TOO_MANY_REQUESTS);
    match call.json::<app::error::DashboardError>().await.unwrap() {
        app::error::DashboardError::Unavailable(why) => {
            assert!(why.contains("BATON_REQUESTS_PER_USER"), "{why}")
        }
        other => panic!("{other:?}"),
    }

    // The slow client leaves: its slot serves alice's waiting requests.
    drop(slow);
    for request in waiting.drain(..) {
        let answered = tokio::time::timeout(Duration::from_secs(5), request)
            .await
            .expect("served once the slot was free")
            .unwrap()
            .unwrap();
        assert_eq!(answered.status(), StatusCode::OK);
    }
    let (status, _) = answer(alice("/api/v1/plans")).await;
    assert_eq!(status, StatusCode::OK, "no slot was lost");
}

/// The queue under a crowd that misbehaves: two users' clients at once,
/// some sending bodies past the limit (answered `413` mid-body), some
/// leaving mid-request or while they wait, some refused. Every request
/// still there is answered, and afterwards no slot is held and nobody
/// waits: a lost slot would leave the replica's pages hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crowd_that_leaves_mid_request_loses_no_slot() {
    use std::time::{Duration, Instant};
    use tokio::io::AsyncWriteExt;
    let db = Arc::new(TestDb::new(Kind::Sqlite).await);
    let args = ["--request-slots", "3", "--requests-per-user", "6"];
    let w = Arc::new(WithUsers::start_on(db, &args).await);
    let addr = w.server.base.trim_start_matches("http://").to_owned();
    let huge = "x".repeat(baton::plan::limits::MAX_PLAN_BODY_BYTES + 1);
    let huge = Arc::new(format!(r#"{{"name": "{huge}", "tasks": []}}"#));
    let until = Instant::now() + Duration::from_secs(4);
    let mut clients = Vec::new();
    for client in 0..24u64 {
        let (w, addr, huge) = (w.clone(), addr.clone(), huge.clone());
        clients.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(client);
            let token = if client % 2 == 0 {
                w.alice_token.clone()
            } else {
                w.victor_token.clone()
            };
            let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
            while Instant::now() < until {
                match rng.u8(0..4) {
                    // A body past the limit: the answer comes mid-body.
                    0 => {
                        let r = w
                            .server
                            .http
                            .post(w.url("/api/v1/plans"))
                            .bearer_auth(&token)
                            .header("content-type", "application/json")
                            .body(huge.as_str().to_owned())
                            .timeout(Duration::from_secs(20))
                            .send()
                            .await
                            .expect("a too-large body is answered");
                        *statuses.entry(r.status().as_u16()).or_default() += 1;
                    }
                    // A request that announces a body and leaves with
                    // half of it sent.
                    1 => {
                        let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
                        let head = format!(
                            "POST /api/v1/plans HTTP/1.1\r\nHost: {addr}\r\nAuthorization: \
                             Bearer {token}\r\nContent-Type: application/json\r\n\
                             Content-Length: 100\r\n\r\n{{\"name\": "
                        );
                        tcp.write_all(head.as_bytes()).await.unwrap();
                        tokio::time::sleep(Duration::from_millis(rng.u64(0..30))).await;
                    }
                    // A client that gives up after a few milliseconds,
                    // waiting or being served.
                    2 => {
                        let r = w
                            .server
                            .http
                            .get(w.url("/api/v1/runs?status=FAILED"))
                            .bearer_auth(&token)
                            .timeout(Duration::from_millis(rng.u64(1..15)))
                            .send()
                            .await;
                        if let Ok(r) = r {
                            *statuses.entry(r.status().as_u16()).or_default() += 1;
                        }
                    }
                    // An ordinary request that waits as long as it takes.
                    _ => {
                        let r = w
                            .server
                            .http
                            .get(w.url("/api/v1/plans"))
                            .bearer_auth(&token)
                            .timeout(Duration::from_secs(20))
                            .send()
                            .await
                            .expect("an ordinary request is answered");
                        *statuses.entry(r.status().as_u16()).or_default() += 1;
                    }
                }
            }
            statuses
        }));
    }
    let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
    for client in clients {
        for (status, n) in client.await.unwrap() {
            *statuses.entry(status).or_default() += n;
        }
    }
    for status in statuses.keys() {
        assert!(
            [200, 413, 429].contains(status),
            "only answers and refusals: {statuses:?}"
        );
    }
    eprintln!("answers by status: {statuses:?}");
    assert!(statuses.get(&200).is_some_and(|n| *n > 20), "{statuses:?}");
    assert!(statuses.contains_key(&413), "{statuses:?}");
    // Half-sent bodies end when their connections close; then nothing is
    // held but this scrape's own slot, and nobody waits.
    let started = Instant::now();
    loop {
        let text = w
            .server
            .http
            .get(w.url("/metrics"))
            .bearer_auth(&w.victor_token)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .expect("the replica still answers")
            .text()
            .await
            .unwrap();
        let idle = ["baton_request_slots_held 1", "baton_requests_waiting 0"]
            .iter()
            .all(|line| text.lines().any(|l| l == *line));
        if idle {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "slots still held after the crowd left: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
