//! The dashboard's live feed over real HTTP: many tabs on one view share
//! one refresher and all see a change; a signed-out request gets no data;
//! the bounds on views and connections refuse past them.

mod common;

use std::sync::Arc;
use std::time::Duration;

use app::error::DashboardError;
use baton::auth::hash_password;
use common::server::Server;
use common::{Kind, TestDb, eventually};
use domain::model::TaskStatus;
use domain::views::PlanPage;
use serde_json::json;

per_backend!(cases:
    twenty_tabs_on_one_plan_share_one_refresher_and_all_see_a_cancel,
    a_signed_out_feed_gets_no_data,
    views_and_connections_past_their_bounds_are_refused,
    one_user_cannot_take_the_feed_from_the_others,
);

/// An open `text/event-stream` response, read event by event.
struct Feed {
    response: reqwest::Response,
    buffer: String,
}

impl Feed {
    async fn open(client: &reqwest::Client, url: &str) -> reqwest::Response {
        client
            .get(url)
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap()
    }

    fn of(response: reqwest::Response) -> Feed {
        assert_eq!(response.status(), 200, "the feed was refused");
        let kind = response.headers()["content-type"].to_str().unwrap();
        assert_eq!(kind, "text/event-stream");
        Feed {
            response,
            buffer: String::new(),
        }
    }

    /// The data of the next event (keep-alive comments skipped).
    async fn next(&mut self) -> String {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                if !data.is_empty() {
                    return data.join("\n");
                }
                continue;
            }
            let chunk = self
                .response
                .chunk()
                .await
                .unwrap()
                .expect("the feed ended");
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// Reads the plan's views until its first task has `status`; a feed
    /// that never brings it fails the test instead of hanging it.
    async fn until_task_status(&mut self, status: TaskStatus) {
        let seen = tokio::time::timeout(Duration::from_secs(60), async {
            while self.next_plan().await.plan.tasks[0].status != status {}
        })
        .await;
        assert!(seen.is_ok(), "the feed never showed the task {status}");
    }

    async fn next_plan(&mut self) -> PlanPage {
        let text = self.next().await;
        serde_json::from_str::<Result<PlanPage, DashboardError>>(&text)
            .unwrap()
            .unwrap()
    }
}

/// A `/metrics` sample of this server, e.g. `baton_live_views`.
async fn metric(server: &Server, name: &str) -> u64 {
    let text = server
        .http
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
        .trim()
        .parse()
        .unwrap()
}

mod cases {
    use super::*;

    pub async fn twenty_tabs_on_one_plan_share_one_refresher_and_all_see_a_cancel(kind: Kind) {
        // No idle refresh during the test: every read is the first one or
        // follows a change.
        let server = Server::start_with(kind, &["--live-idle-refresh", "1h"]).await;
        let (_, plan) = server
            .post(
                "/api/v1/plans",
                json!({"name": "watched", "tasks": [{"name": "long", "target": "t", "sleep": "1h"}]}),
            )
            .await;
        let id = plan["id"].as_i64().unwrap();
        let task = plan["tasks"][0]["id"].as_i64().unwrap();
        eventually(Duration::from_secs(30), "the task runs", || async {
            let plan: domain::model::PlanView = server.get(&format!("/api/v1/plans/{id}")).await;
            (plan.tasks[0].status == TaskStatus::Running).then_some(())
        })
        .await;
        let reads_before = metric(&server, "baton_live_reads_total").await;

        let url = format!("{}/live/plan/{id}", server.base);
        let opened =
            futures_util::future::join_all((0..20).map(|_| Feed::open(&server.http, &url))).await;
        let mut feeds: Vec<Feed> = opened.into_iter().map(Feed::of).collect();
        for feed in &mut feeds {
            let page = feed.next_plan().await;
            assert_eq!(page.plan.tasks[0].status, TaskStatus::Running);
        }
        assert_eq!(metric(&server, "baton_live_subscribers").await, 20);
        assert_eq!(
            metric(&server, "baton_live_views").await,
            1,
            "one view, one refresher"
        );
        let reads = metric(&server, "baton_live_reads_total").await - reads_before;
        assert!(
            reads < 20,
            "20 tabs caused {reads} reads of one view: the feed reads per tab"
        );

        let (status, _) = server
            .post_empty(&format!("/api/v1/tasks/{task}/cancel"))
            .await;
        assert_eq!(status, 200);
        for feed in &mut feeds {
            feed.until_task_status(TaskStatus::Canceled).await;
        }

        // The tabs go away: so does the view's refresher.
        drop(feeds);
        eventually(Duration::from_secs(30), "the refresher stopped", || async {
            (metric(&server, "baton_live_views").await == 0
                && metric(&server, "baton_live_subscribers").await == 0)
                .then_some(())
        })
        .await;
    }

    pub async fn a_signed_out_feed_gets_no_data(kind: Kind) {
        let dir = tempfile::tempdir().unwrap();
        let users = dir.path().join("users.yaml");
        std::fs::write(
            &users,
            format!(
                "users:\n- {{name: victor, role: viewer, password_hash: '{}'}}\n",
                hash_password("victor-pw").unwrap()
            ),
        )
        .unwrap();
        let server = Server::start_on(
            Arc::new(TestDb::new(kind).await),
            &["--users-file", users.to_str().unwrap()],
        )
        .await;
        for view in ["overview", "plan/1", "run/1", "runs?status=failed"] {
            let response = Feed::open(&server.http, &format!("{}/live/{view}", server.base)).await;
            assert_eq!(response.status(), 401, "{view}");
            let body = response.text().await.unwrap();
            let error: DashboardError = serde_json::from_str(&body).unwrap();
            assert!(
                matches!(error, DashboardError::Unauthenticated(_)),
                "{view}: {body}"
            );
        }
        assert_eq!(
            metric_open(&server).await,
            0,
            "a refresher started for nobody"
        );
    }

    pub async fn views_and_connections_past_their_bounds_are_refused(kind: Kind) {
        let server = Server::start_with(
            kind,
            &["--live-max-views", "2", "--live-max-subscribers", "3"],
        )
        .await;
        let url = |view: &str| format!("{}/live/{view}", server.base);
        let _overview = Feed::of(Feed::open(&server.http, &url("overview")).await);
        let _plan = Feed::of(Feed::open(&server.http, &url("plan/1")).await);
        // A third distinct view: a client walking plan ids gets no more
        // refreshers.
        for id in 2..5 {
            let refused = Feed::open(&server.http, &url(&format!("plan/{id}"))).await;
            assert_eq!(refused.status(), 503);
            assert!(refused.headers().contains_key("retry-after"));
            let why = refused.text().await.unwrap();
            assert!(why.contains("BATON_LIVE_MAX_VIEWS"), "{why}");
        }
        // The same view once more fits; a fourth connection does not.
        let _again = Feed::of(Feed::open(&server.http, &url("overview")).await);
        let refused = Feed::open(&server.http, &url("overview")).await;
        assert_eq!(refused.status(), 503);
        let why = refused.text().await.unwrap();
        assert!(why.contains("BATON_LIVE_MAX_SUBSCRIBERS"), "{why}");
        assert_eq!(metric(&server, "baton_live_views").await, 2);
        assert_eq!(metric(&server, "baton_live_subscribers").await, 3);
        // Not a view at all: 404, and nothing counted.
        let nothing = Feed::open(&server.http, &url("plan/x")).await;
        assert_eq!(nothing.status(), 404);
    }

    /// One user's connections are bounded on their own: past
    /// `BATON_LIVE_MAX_PER_USER` that user's new feeds are refused (with
    /// the replica's bounds far off), and closing them gives the places
    /// back within a keep-alive.
    pub async fn one_user_cannot_take_the_feed_from_the_others(kind: Kind) {
        let server = Server::start_with(kind, &["--live-max-per-user", "3"]).await;
        let url = |view: &str| format!("{}/live/{view}", server.base);
        let mut mine = Vec::new();
        for id in 1..=3 {
            mine.push(Feed::of(
                Feed::open(&server.http, &url(&format!("plan/{id}"))).await,
            ));
        }
        let refused = Feed::open(&server.http, &url("plan/4")).await;
        assert_eq!(refused.status(), 503);
        let why = refused.text().await.unwrap();
        assert!(why.contains("BATON_LIVE_MAX_PER_USER"), "{why}");
        assert_eq!(metric(&server, "baton_live_views").await, 3);
        drop(mine);
        // Places come back once the server finds the connections closed
        // (its next keep-alive write, within 5 s).
        eventually(Duration::from_secs(15), "the places given back", || async {
            (metric(&server, "baton_live_subscribers").await == 0).then_some(())
        })
        .await;
        let _again = Feed::of(Feed::open(&server.http, &url("plan/4")).await);
    }
}

/// On PostgreSQL a commit on another replica reaches this replica's feed
/// through LISTEN/NOTIFY, not by waiting for the idle refresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_on_another_replica_reaches_the_feed_through_notify() {
    let db = Arc::new(TestDb::new(Kind::Postgres).await);
    // The watching replica never re-reads idly within the test.
    let watching = Server::start_on(db.clone(), &["--live-idle-refresh", "1h"]).await;
    let other = Server::start_on(db, &[]).await;
    // Scheduled far ahead: PENDING, so the cancel is one commit on the
    // other replica and nothing on the watching one moves it.
    let (_, plan) = other
        .post(
            "/api/v1/plans",
            json!({"name": "far", "tasks": [{"name": "later", "target": "t", "sleep": "1s",
                "run_at": "2099-01-01T00:00:00Z"}]}),
        )
        .await;
    let id = plan["id"].as_i64().unwrap();
    let task = plan["tasks"][0]["id"].as_i64().unwrap();
    let mut feed =
        Feed::of(Feed::open(&watching.http, &format!("{}/live/plan/{id}", watching.base)).await);
    let first = feed.next_plan().await;
    assert_eq!(first.plan.tasks[0].status, TaskStatus::Pending);

    let (status, _) = other
        .post_empty(&format!("/api/v1/tasks/{task}/cancel"))
        .await;
    assert_eq!(status, 200);
    feed.until_task_status(TaskStatus::Canceled).await;
}

/// Views followed on a server whose `/metrics` needs a sign-in: read from
/// the hub's side by asking as the one user.
async fn metric_open(server: &Server) -> u64 {
    let text = server
        .http
        .get(format!("{}/metrics", server.base))
        .basic_auth("victor", Some("victor-pw"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("baton_live_views "))
        .expect("baton_live_views in /metrics")
        .trim()
        .parse()
        .unwrap()
}
