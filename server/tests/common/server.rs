//! A real `baton` HTTP server in the test process: the scheduler loops,
//! the API and the dashboard on a free loopback port, on a fresh database.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use baton::cli::Cli;
use baton::config::Settings;
use baton::executor::Registry;
use baton::loops::{Replica, new_replica_id};
use baton::store::{ReplicaInfo, Store};
use clap::Parser;
use domain::model::{PlanStatus, PlanView};
use domain::time::Ts;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{Kind, TestDb, eventually};

pub struct Server {
    pub base: String,
    pub http: reqwest::Client,
    shutdown: CancellationToken,
    /// The database, for tests that reach around Baton (shared by the
    /// replicas of [`Server::start_on`]).
    pub db: Arc<TestDb>,
    pub store: Arc<dyn Store>,
    _replica: Replica,
}

impl Server {
    pub async fn start(kind: Kind) -> Self {
        Server::start_with(kind, &[]).await
    }

    /// A server with `args` added to its command line (e.g. a users file).
    pub async fn start_with(kind: Kind, args: &[&str]) -> Self {
        Server::start_on(Arc::new(TestDb::new(kind).await), args).await
    }

    /// A replica on `db`, which other servers may share (PostgreSQL).
    pub async fn start_on(db: Arc<TestDb>, args: &[&str]) -> Self {
        let store = db.store().await;
        let base_args = [
            "baton",
            "--poll-interval",
            "50ms",
            "--heartbeat-interval",
            "200ms",
            "--workers",
            "4",
        ];
        let cli = Cli::parse_from(base_args.iter().chain(args));
        let settings: Settings = cli.settings;
        let info = ReplicaInfo {
            replica_id: new_replica_id(),
            hostname: "test".into(),
            labels: vec!["local".into()],
            version: "test".into(),
            started_at: Ts::now(),
        };
        let shutdown = CancellationToken::new();
        let replica = Replica::start(
            store.clone(),
            info.clone(),
            settings.scheduler(),
            Registry::builtin().with_commands(
                settings
                    .command_executor()
                    .unwrap()
                    .supervised_by(env!("CARGO_BIN_EXE_baton")),
            ),
            shutdown.clone(),
        )
        .await
        .unwrap();
        let users = settings.users().unwrap();
        let app =
            baton::serve::router(store.clone(), info, replica.view(), &settings, users).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(stop.cancelled_owned())
            .await
            .unwrap();
        });
        Server {
            base: format!("http://{addr}"),
            http: reqwest::Client::new(),
            shutdown,
            db,
            store,
            _replica: replica,
        }
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    pub async fn post_empty(&self, path: &str) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    /// A GET whose status the test checks itself.
    pub async fn get_status(&self, path: &str) -> (u16, Value) {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    /// A page's HTML (or any text answer), asserting it was a success.
    pub async fn text(&self, path: &str) -> String {
        self.get_ok(path).await.text().await.unwrap()
    }

    pub async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> T {
        self.get_ok(path).await.json().await.unwrap()
    }

    async fn get_ok(&self, path: &str) -> reqwest::Response {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "GET {path}: {}", r.status());
        r
    }

    pub async fn wait_plan(&self, id: i64, status: PlanStatus) -> PlanView {
        eventually(
            Duration::from_secs(30),
            &format!("plan {id} {status}"),
            || async move {
                let view: PlanView = self.get(&format!("/api/v1/plans/{id}")).await;
                (view.status == status).then_some(view)
            },
        )
        .await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
