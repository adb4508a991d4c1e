//! Real `baton serve` processes for tests: start one on a database, learn
//! its replica id, talk to its API and signal it (SIGKILL, SIGSTOP/SIGCONT,
//! SIGTERM) the way an operator or a crash would.
//!
//! Each process carries a label of its own (`proc-N`, next to any labels
//! the test asks for): the API does not say which replica answers, so the
//! label is how a test finds its process in `/api/v1/replicas`.

use std::collections::BTreeMap;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use domain::model::{PlanView, ReplicaView};
use tokio::process::{Child, Command};

use super::eventually;

/// How long a process may take to migrate, bind and answer `/healthz`;
/// generous because tests share small machines with compilers.
const START_WITHIN: Duration = Duration::from_secs(30);

/// Distinguishes the processes one test binary starts.
static STARTED: AtomicUsize = AtomicUsize::new(0);

/// Environment for a `baton serve`; later settings of a variable win.
#[derive(Debug, Clone)]
pub struct Options {
    env: BTreeMap<String, String>,
    labels: Vec<String>,
    /// The port to listen on; a free one when `None`.
    port: Option<u16>,
    /// Serves HTTPS with this certificate; the harness trusts its CA.
    tls: Option<TestCertificate>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            env: BTreeMap::from([
                ("BATON_WORKERS".to_owned(), "4".to_owned()),
                ("BATON_POLL_INTERVAL".to_owned(), "200ms".to_owned()),
            ]),
            labels: Vec::new(),
            port: None,
            tls: None,
        }
    }
}

impl Options {
    /// Sets a `BATON_*` (or any) variable. Use [`Options::label`] for
    /// labels: `BATON_LABELS` is composed by the harness.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        assert_ne!(key, "BATON_LABELS", "use Options::label");
        self.env.insert(key.to_owned(), value.to_owned());
        self
    }

    /// Liveness periods shrunk to fractions of a second (heartbeats and
    /// sweeps every 200 ms, stale after 1 s, a 1 s lease, polls every
    /// 100 ms), so a test of failover waits seconds, not minutes.
    pub fn fast_liveness() -> Self {
        Options::default()
            .env("BATON_HEARTBEAT_INTERVAL", "200ms")
            .env("BATON_STALE_AFTER", "1s")
            .env("BATON_SWEEP_INTERVAL", "200ms")
            .env("BATON_LEADER_LEASE", "1s")
            .env("BATON_POLL_INTERVAL", "100ms")
    }

    /// Runs the process with its host's wall clock off by `offset`
    /// (libfaketime's syntax: `+4`, `-4`, `+2h`), as a host without NTP
    /// would be. Its monotonic clock is left alone, as a stepped wall
    /// clock leaves it.
    pub fn wall_clock_off_by(self, offset: &str) -> Self {
        self.env("LD_PRELOAD", libfaketime())
            .env("FAKETIME", offset)
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
    }

    /// Listens on `port`, the same one across restarts (agents and
    /// proxies keep its address).
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Serves HTTPS with `certificate` (`BATON_TLS_CERT`, `BATON_TLS_KEY`);
    /// the harness reaches it trusting the certificate's CA.
    pub fn tls(mut self, certificate: &TestCertificate) -> Self {
        self.tls = Some(certificate.clone());
        self.env("BATON_TLS_CERT", certificate.cert.to_str().unwrap())
            .env("BATON_TLS_KEY", certificate.key.to_str().unwrap())
    }

    /// Adds a node label the replica carries, for pinned tasks.
    pub fn label(mut self, label: &str) -> Self {
        self.labels.push(label.to_owned());
        self
    }
}

/// A private CA and a server certificate it signed for 127.0.0.1 and
/// localhost, made by the `openssl` command in a directory of their own.
#[derive(Debug, Clone)]
pub struct TestCertificate {
    pub ca_cert: std::path::PathBuf,
    pub ca_key: std::path::PathBuf,
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
}

impl TestCertificate {
    pub fn new(dir: &std::path::Path) -> TestCertificate {
        let path = |name: &str| dir.join(name);
        let openssl = |args: &[&str]| {
            let out = std::process::Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .expect("the openssl command (Debian's openssl package)");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut ca = vec!["req", "-x509", "-days", "2", "-subj", "/CN=baton test CA"];
        ca.extend(ec);
        ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
        openssl(&ca);
        let mut csr = vec!["req", "-subj", "/CN=localhost"];
        csr.extend(ec);
        csr.extend(["-keyout", "key.pem", "-out", "server.csr"]);
        openssl(&csr);
        std::fs::write(
            path("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "cert.pem",
        ]);
        TestCertificate {
            ca_cert: path("ca.pem"),
            ca_key: path("ca.key"),
            cert: path("cert.pem"),
            key: path("key.pem"),
        }
    }

    /// The CA, for a client that must trust the server.
    pub fn ca(&self) -> reqwest::Certificate {
        reqwest::Certificate::from_pem(&std::fs::read(&self.ca_cert).unwrap()).unwrap()
    }
}

/// Debian's libfaketime (`scripts/test.sh` installs it).
fn libfaketime() -> &'static str {
    const PLACES: [&str; 2] = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    ];
    PLACES
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect(
            "libfaketime is not installed: `apt-get install libfaketime` (scripts/test.sh does)",
        )
}

/// One running `baton serve`; killed when dropped.
pub struct Baton {
    child: Child,
    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub base: String,
    /// The label only this process carries (none without workers).
    pub label: String,
    /// The replica id this process registered under.
    pub replica_id: String,
    http: reqwest::Client,
}

/// A port nobody listens on right now (the process binds it shortly
/// after; a collision in between is unlikely enough for tests).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A process with the default options.
pub async fn spawn_baton(database_url: &str) -> Baton {
    Baton::start(database_url, &Options::default()).await
}

impl Baton {
    /// Starts a process and returns once it answers `/healthz` and its
    /// replica row is visible.
    pub async fn start(database_url: &str, options: &Options) -> Baton {
        let port = options.port.unwrap_or_else(free_port);
        // A replica without workers may carry no label (it would run
        // nothing pinned to it): it is told apart as the newest replica
        // without one.
        let runs_tasks = options.env.get("BATON_WORKERS").is_none_or(|w| w != "0");
        let label = match runs_tasks {
            true => format!("proc-{}", STARTED.fetch_add(1, Ordering::SeqCst)),
            false => {
                assert!(
                    options.labels.is_empty(),
                    "a replica without workers has no labels"
                );
                String::new()
            }
        };
        let labels = std::iter::once(label.clone())
            .chain(options.labels.iter().cloned())
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(",");
        // baton logs to stdout: shown only when TEST_LOG asks for logs.
        let log_level = std::env::var("TEST_LOG").ok();
        let stdout = match log_level {
            Some(_) => Stdio::inherit(),
            None => Stdio::null(),
        };
        let child = Command::new(env!("CARGO_BIN_EXE_baton"))
            .arg("serve")
            .envs(&options.env)
            .env("BATON_DATABASE_URL", database_url)
            .env("BATON_LISTEN", format!("127.0.0.1:{port}"))
            .env("BATON_LABELS", labels)
            .env("BATON_LOG", log_level.as_deref().unwrap_or("warn"))
            .stdout(stdout)
            .kill_on_drop(true)
            .spawn()
            .expect("start baton");
        let scheme = if options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let base = format!("{scheme}://127.0.0.1:{port}");
        // A server with users: the harness reads the API with the token
        // the test handed over (the server itself ignores BATON_TOKEN).
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(token) = options.env.get("BATON_TOKEN") {
            headers.insert(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {token}").parse().unwrap(),
            );
        }
        let mut http = reqwest::Client::builder().default_headers(headers);
        if let Some(tls) = &options.tls {
            http = http.add_root_certificate(tls.ca());
        }
        let http = http.build().unwrap();
        eventually(START_WITHIN, "baton to answer /healthz", || {
            let url = format!("{base}/healthz");
            let http = http.clone();
            async move {
                http.get(url)
                    .send()
                    .await
                    .ok()
                    .filter(|r| r.status().is_success())
            }
        })
        .await;
        let mut baton = Baton {
            child,
            base,
            label,
            replica_id: String::new(),
            http,
        };
        // The replica writes its row before it listens, so one look is
        // enough once /healthz answers.
        let me = baton
            .replicas()
            .await
            .into_iter()
            .filter(|r| match runs_tasks {
                true => r.labels.contains(&baton.label),
                false => r.labels.is_empty(),
            })
            .max_by_key(|r| r.started_at)
            .unwrap_or_else(|| panic!("no replica labelled {:?}", baton.label));
        baton.replica_id = me.replica_id;
        baton
    }

    pub fn pid(&self) -> i32 {
        self.child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .expect("the process was not waited for yet")
    }

    /// Kills the process and waits until it is gone: a crash.
    pub async fn sigkill(&mut self) {
        self.child.start_kill().expect("SIGKILL baton");
        self.child.wait().await.expect("reap baton");
    }

    /// Freezes the process: it still exists but runs no code, like a
    /// long GC pause or a VM stall.
    pub fn sigstop(&self) {
        self.signal(libc::SIGSTOP);
    }

    pub fn sigcont(&self) {
        self.signal(libc::SIGCONT);
    }

    /// Asks the process to shut down and waits for it to exit; panics
    /// when it has not exited `within`.
    pub async fn sigterm_and_wait(&mut self, within: Duration) -> ExitStatus {
        self.signal(libc::SIGTERM);
        tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("baton did not exit within {within:?} of SIGTERM"))
            .expect("wait for baton")
    }

    /// Waits for the process to exit on its own (e.g. an injected fault);
    /// callers bound it with a timeout.
    pub async fn wait(&mut self) -> ExitStatus {
        self.child.wait().await.expect("wait for baton")
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill only sends a signal, to a child we have not reaped
        // (`pid` panics otherwise), so the pid is still ours.
        let rc = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(
            rc,
            0,
            "signal {signal}: {}",
            std::io::Error::last_os_error()
        );
    }

    /// `GET /api/v1/replicas` as this process answers it.
    pub async fn replicas(&self) -> Vec<ReplicaView> {
        self.try_replicas().await.expect("GET /api/v1/replicas")
    }

    /// Like [`Baton::replicas`], `None` on any failure: for polling.
    pub async fn try_replicas(&self) -> Option<Vec<ReplicaView>> {
        let response = self
            .http
            .get(format!("{}/api/v1/replicas", self.base))
            .send()
            .await
            .ok()?;
        response.error_for_status().ok()?.json().await.ok()
    }

    /// `GET {path}`: status and JSON answer (`null` if none).
    pub async fn get_json(&self, path: &str) -> (reqwest::StatusCode, serde_json::Value) {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("GET");
        let status = response.status();
        (status, response.json().await.unwrap_or_default())
    }

    /// `GET {path}` as text, `None` on any failure: for polling.
    pub async fn get_text(&self, path: &str) -> Option<String> {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .ok()?;
        response.error_for_status().ok()?.text().await.ok()
    }

    /// `POST {path}` with a JSON body (empty when `None`): status and
    /// JSON answer.
    pub async fn post_json(
        &self,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (reqwest::StatusCode, serde_json::Value) {
        let mut request = self.http.post(format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("POST");
        let status = response.status();
        (status, response.json().await.unwrap_or_default())
    }

    /// Submits a plan written as JSON.
    pub async fn submit(&self, plan: serde_json::Value) -> PlanView {
        let response = self
            .http
            .post(format!("{}/api/v1/plans", self.base))
            .json(&plan)
            .send()
            .await
            .expect("POST /api/v1/plans");
        let status = response.status();
        let body = response.text().await.expect("plan submission body");
        assert!(status.is_success(), "plan rejected ({status}): {body}");
        serde_json::from_str(&body).expect("a PlanView")
    }

    /// `GET /api/v1/plans/{id}`, `None` on any failure: for polling.
    pub async fn plan(&self, id: i64) -> Option<PlanView> {
        let response = self
            .http
            .get(format!("{}/api/v1/plans/{id}", self.base))
            .send()
            .await
            .ok()?;
        response.error_for_status().ok()?.json().await.ok()
    }
}

/// A command task that ticks for a minute at most (bounded, so a failed
/// test leaves no shell behind for long), its shell's pid in `pid_file`.
pub fn ticker_task(pid_file: &std::path::Path) -> serde_json::Value {
    serde_json::json!({"name": "ticker", "target": "t", "command": {
        "argv": ["sh", "-c", "echo $$ > \"$PID_FILE\"; i=0; \
            while [ $i -lt 600 ]; do echo tick $i; i=$((i+1)); sleep 0.1; done"],
        "env": {"PID_FILE": pid_file.to_str().unwrap()},
    }})
}

/// The pid [`ticker_task`] wrote.
pub fn ticker_pid(pid_file: &std::path::Path) -> i32 {
    std::fs::read_to_string(pid_file)
        .expect("the shell wrote its pid before ticking")
        .trim()
        .parse()
        .unwrap()
}

/// Whether a process with this pid runs: exists and is not a zombie (a
/// killed command whose parent died with it waits for init to reap it,
/// which some container inits do only now and then).
pub fn process_running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// One running `baton agent`; killed when dropped.
pub struct Agent {
    child: Child,
    /// The label only this process carries.
    pub label: String,
    /// The id its hello was given (`a-…`).
    pub agent_id: String,
}

impl Agent {
    /// Starts `baton agent` for the replicas at `servers` with `workers`
    /// and any `env`, and returns once its row is visible through
    /// `watch` (any replica of the cluster).
    pub async fn start(servers: &[&Baton], workers: usize, env: &[(&str, &str)]) -> Agent {
        let label = format!("proc-{}", STARTED.fetch_add(1, Ordering::SeqCst));
        Agent::start_labelled(servers, workers, env, &label).await
    }

    /// An agent reaching the replicas at `urls` (through proxies, say),
    /// found through `watch`'s API.
    pub async fn start_at(
        urls: &[String],
        watch: &Baton,
        workers: usize,
        env: &[(&str, &str)],
    ) -> Agent {
        let label = format!("proc-{}", STARTED.fetch_add(1, Ordering::SeqCst));
        Agent::spawn(urls, watch, workers, env, &label).await
    }

    /// [`Agent::start`] with the label that finds it given (a token may
    /// allow only labels the test knows).
    pub async fn start_labelled(
        servers: &[&Baton],
        workers: usize,
        env: &[(&str, &str)],
        label: &str,
    ) -> Agent {
        let urls: Vec<String> = servers.iter().map(|b| b.base.clone()).collect();
        Agent::spawn(&urls, servers[0], workers, env, label).await
    }

    async fn spawn(
        urls: &[String],
        watch: &Baton,
        workers: usize,
        env: &[(&str, &str)],
        label: &str,
    ) -> Agent {
        let label = label.to_owned();
        let log_level = std::env::var("TEST_LOG").ok();
        let stdout = match log_level {
            Some(_) => Stdio::inherit(),
            None => Stdio::null(),
        };
        let list: Vec<&str> = urls.iter().map(|u| u.trim_end_matches('/')).collect();
        let extra: Vec<&str> = env
            .iter()
            .filter(|(k, _)| *k == "BATON_LABELS")
            .map(|(_, v)| *v)
            .collect();
        let labels = std::iter::once(label.as_str())
            .chain(extra)
            .collect::<Vec<_>>()
            .join(",");
        let child = Command::new(env!("CARGO_BIN_EXE_baton"))
            .arg("agent")
            .envs(env.iter().copied().filter(|(k, _)| *k != "BATON_LABELS"))
            .env("BATON_AGENT_SERVER", list.join(","))
            .env("BATON_WORKERS", workers.to_string())
            .env("BATON_LABELS", labels)
            .env("BATON_LOG", log_level.as_deref().unwrap_or("warn"))
            .stdout(stdout)
            .kill_on_drop(true)
            .spawn()
            .expect("start baton agent");
        let me = eventually(START_WITHIN, "the agent's row", || {
            let label = label.clone();
            async move {
                watch
                    .try_replicas()
                    .await?
                    .into_iter()
                    .find(|r| r.labels.contains(&label))
            }
        })
        .await;
        Agent {
            child,
            label,
            agent_id: me.replica_id,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .expect("the agent was not waited for yet")
    }

    /// Kills the agent and waits until it is gone: a crash.
    pub async fn sigkill(&mut self) {
        self.child.start_kill().expect("SIGKILL baton agent");
        self.child.wait().await.expect("reap baton agent");
    }

    pub fn sigstop(&self) {
        // SAFETY: as in `Baton::signal`: our child, not reaped yet.
        assert_eq!(unsafe { libc::kill(self.pid(), libc::SIGSTOP) }, 0);
    }

    pub fn sigcont(&self) {
        // SAFETY: as above.
        assert_eq!(unsafe { libc::kill(self.pid(), libc::SIGCONT) }, 0);
    }

    /// Asks the agent to stop and waits for it to exit.
    pub async fn sigterm_and_wait(&mut self, within: Duration) -> ExitStatus {
        // SAFETY: as above.
        assert_eq!(unsafe { libc::kill(self.pid(), libc::SIGTERM) }, 0);
        tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the agent did not exit within {within:?} of SIGTERM"))
            .expect("wait for baton agent")
    }

    /// Waits for the agent to exit on its own; callers bound it.
    pub async fn wait(&mut self) -> ExitStatus {
        self.child.wait().await.expect("wait for baton agent")
    }
}
