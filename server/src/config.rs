//! The settings every subcommand shares, from flags and the environment:
//! every flag has a `BATON_*` variable; flags win over variables, variables
//! over defaults.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::loops::DeliveryConfig;
use crate::loops::{self, SchedulerConfig};
use crate::secret::Secret;
use crate::store::NotifyTargets;

/// The shortest dashboard sign-in `BATON_SESSION_TTL` may ask for.
const MIN_SESSION_TTL: Duration = Duration::from_secs(60);

/// The shortest loop periods a replica serves with: below them a loop
/// spins, burning a core and sending the database a statement per turn
/// (`1ms` is an easy slip for `1s`), for no pickup it would not get anyway
/// from the wake-ups.
const MIN_PERIODS: [(&str, Duration); 3] = [
    ("BATON_POLL_INTERVAL", Duration::from_millis(10)),
    ("BATON_HEARTBEAT_INTERVAL", Duration::from_millis(100)),
    ("BATON_SWEEP_INTERVAL", Duration::from_millis(100)),
];

/// The shortest `BATON_STALE_AFTER` a replica serves with. Below it, a
/// slow commit or a scheduler hiccup reads as a dead replica: runs are
/// swept and retried while they still execute, and a command's
/// supervisor (quiet after half of it) kills healthy work.
const MIN_STALE_AFTER: Duration = Duration::from_secs(1);

/// The database, for the commands that open it directly (`migrate`,
/// `prune`) and need none of a replica's other settings.
#[derive(Args, Debug, Clone)]
pub struct DatabaseArg {
    /// Database: `sqlite://PATH` or `postgres://USER@HOST/DB`.
    #[arg(
        long = "database-url",
        value_name = "DATABASE_URL",
        env = "BATON_DATABASE_URL",
        default_value = "sqlite://./data/baton.db",
        // `--help` would print the password with the variable's value.
        hide_env_values = true
    )]
    pub url: DatabaseUrl,
}

#[derive(Args, Debug, Clone)]
pub struct Settings {
    #[command(flatten)]
    pub database: DatabaseArg,
    /// Address the API and dashboard listen on.
    #[arg(long, env = "BATON_LISTEN", default_value = "127.0.0.1:3000")]
    pub listen: SocketAddr,
    /// Executions this replica runs at once; 0: it schedules and serves,
    /// and runs no task.
    #[arg(long, env = "BATON_WORKERS", default_value_t = loops::DEFAULT_WORKERS)]
    pub workers: usize,
    /// Fallback wake-up of the scheduler loops when no notification comes.
    #[arg(long, env = "BATON_POLL_INTERVAL", default_value = duration_text(loops::DEFAULT_POLL_INTERVAL), value_parser = humantime::parse_duration)]
    pub poll_interval: Duration,
    /// Replica and run heartbeat period.
    #[arg(long, env = "BATON_HEARTBEAT_INTERVAL", default_value = duration_text(loops::DEFAULT_HEARTBEAT_INTERVAL), value_parser = humantime::parse_duration)]
    pub heartbeat_interval: Duration,
    /// A replica or run without a heartbeat for this long is stale.
    #[arg(long, env = "BATON_STALE_AFTER", default_value = duration_text(loops::DEFAULT_STALE_AFTER), value_parser = humantime::parse_duration)]
    pub stale_after: Duration,
    /// How long shutdown lets running executions finish.
    #[arg(long, env = "BATON_SHUTDOWN_GRACE", default_value = duration_text(loops::DEFAULT_SHUTDOWN_GRACE), value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
    /// How often the leader fails runs whose replica or deadlines lapsed.
    #[arg(long, env = "BATON_SWEEP_INTERVAL", default_value = duration_text(loops::DEFAULT_SWEEP_INTERVAL), value_parser = humantime::parse_duration)]
    pub sweep_interval: Duration,
    /// How long the leader's lease lasts without renewal; another replica
    /// takes over within this time after the leader dies.
    #[arg(long, env = "BATON_LEADER_LEASE", default_value = duration_text(loops::DEFAULT_LEADER_LEASE), value_parser = humantime::parse_duration)]
    pub leader_lease: Duration,
    /// The most of one run's output stored (`1MiB`, `512KiB`, a byte
    /// count; 4 KiB to 1 GiB). Later output is discarded and the cut is
    /// marked in the run's log.
    #[arg(long, env = "BATON_MAX_LOG_BYTES", default_value = "1MiB", value_parser = crate::executor::output::parse_log_limit)]
    pub max_log_bytes: usize,
    /// How long finished plans are kept (`30d`, `12h`; at least 1m), or
    /// `forever`. The leader deletes older ones with their runs, events,
    /// logs and deliveries.
    #[arg(long, env = "BATON_RETAIN_FINISHED", default_value = crate::retention::DEFAULT_RETAIN)]
    pub retain_finished: crate::retention::Retain,
    /// Where every plan's notifications are POSTed (besides the plan's own
    /// `webhooks`).
    #[arg(long, env = "BATON_WEBHOOK_URL")]
    pub webhook_url: Option<String>,
    /// Signs deliveries (`X-Baton-Signature: sha256=<HMAC>`).
    #[arg(long, env = "BATON_WEBHOOK_SECRET", hide_env_values = true)]
    pub webhook_secret: Option<Secret>,
    /// Attempts per delivery before it is given up.
    #[arg(long, env = "BATON_WEBHOOK_MAX_ATTEMPTS", default_value_t = loops::DEFAULT_WEBHOOK_MAX_ATTEMPTS)]
    pub webhook_max_attempts: u32,
    /// The dashboard's live feed reads one view at most this often,
    /// however many tabs watch it (100ms to 60s).
    #[arg(long, env = "BATON_LIVE_INTERVAL", default_value = duration_text(crate::dashboard::live::DEFAULT_INTERVAL), value_parser = humantime::parse_duration)]
    pub live_interval: Duration,
    /// The live feed re-reads a watched view this often even when no
    /// change was signalled, for heartbeat ages and changes made on other
    /// replicas that announce nothing (at least BATON_LIVE_INTERVAL).
    #[arg(long, env = "BATON_LIVE_IDLE_REFRESH", default_value = duration_text(crate::dashboard::live::DEFAULT_IDLE_REFRESH), value_parser = humantime::parse_duration)]
    pub live_idle_refresh: Duration,
    /// The most distinct views (a plan, a search) one replica's live feed
    /// follows at once; past it, new ones are refused with 503 and those
    /// pages poll instead.
    #[arg(long, env = "BATON_LIVE_MAX_VIEWS", default_value_t = crate::dashboard::live::DEFAULT_MAX_VIEWS)]
    pub live_max_views: usize,
    /// The most open live connections (tabs) one replica serves; past it,
    /// new ones are refused with 503.
    #[arg(long, env = "BATON_LIVE_MAX_SUBSCRIBERS", default_value_t = crate::dashboard::live::DEFAULT_MAX_SUBSCRIBERS)]
    pub live_max_subscribers: usize,
    /// The most open live connections one user has on one replica; past
    /// it, that user's new ones are refused with 503 (their pages poll).
    #[arg(long, env = "BATON_LIVE_MAX_PER_USER", default_value_t = crate::dashboard::live::DEFAULT_MAX_PER_USER)]
    pub live_max_per_user: usize,
    /// How many costly reads (runs and audit searches, bulk counts) one
    /// user may have in flight on one replica; a search through error
    /// texts or names, or a bulk count, weighs 2. Past it: 429.
    #[arg(long, env = "BATON_SEARCH_SHARES_PER_USER", default_value_t = crate::fair_share::DEFAULT_PER_USER)]
    pub search_shares_per_user: usize,
    /// Requests one replica works on at once (live feeds and public paths
    /// aside); more wait, and a freed slot goes to the person holding the
    /// fewest. One person holds at most half of them.
    #[arg(long, env = "BATON_REQUEST_SLOTS", default_value_t = crate::fair_queue::DEFAULT_SLOTS)]
    pub request_slots: usize,
    /// Requests one signed-in user may have in flight (working or waiting)
    /// on one replica. Past it: 429.
    #[arg(long, env = "BATON_REQUESTS_PER_USER", default_value_t = crate::fair_queue::DEFAULT_PER_USER)]
    pub requests_per_user: usize,
    /// The dashboard's address as operators reach it, for links in
    /// notifications. Default: http://<BATON_LISTEN>, https:// with
    /// BATON_TLS_CERT.
    #[arg(long, env = "BATON_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Node labels this replica carries (comma-separated), for pinned tasks.
    #[arg(long, env = "BATON_LABELS", value_delimiter = ',')]
    pub labels: Vec<String>,
    /// Who may sign in, with which role (YAML; see docs/security.md). Without
    /// it the server is open to anyone who reaches it, so it only listens
    /// on loopback addresses.
    #[arg(long, env = "BATON_USERS_FILE")]
    pub users_file: Option<PathBuf>,
    /// How long a dashboard sign-in lasts.
    #[arg(long, env = "BATON_SESSION_TTL", default_value = "12h", value_parser = humantime::parse_duration)]
    pub session_ttl: Duration,
    /// Programs a command task may start (comma-separated `argv[0]`s,
    /// compared as written). Unset: any program (see
    /// docs/security.md).
    #[arg(long, env = "BATON_ALLOWED_COMMANDS", value_delimiter = ',')]
    pub allowed_commands: Vec<String>,
    /// Variables of this server's environment that commands inherit
    /// (comma-separated names), beside PATH, HOME, USER, LOGNAME, SHELL,
    /// LANG, LANGUAGE, LC_*, TZ, TMPDIR and TERM. Baton's own settings
    /// (BATON_*) are never passed on (see docs/security.md).
    #[arg(long, env = "BATON_TASK_ENV", value_delimiter = ',')]
    pub task_env: Vec<String>,
    /// Proxies (addresses or CIDR ranges, comma-separated) whose
    /// `X-Forwarded-For` names the client for the per-address count of
    /// wrong passwords; from anyone else the header is only recorded.
    #[arg(long, env = "BATON_TRUSTED_PROXIES", value_delimiter = ',')]
    pub trusted_proxies: Vec<String>,
    /// Serve HTTPS with this PEM certificate chain (leaf first); needs
    /// BATON_TLS_KEY. Read at start: a renewed certificate takes a
    /// restart (rolling, one replica at a time, loses nothing).
    #[arg(long, env = "BATON_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of BATON_TLS_CERT.
    #[arg(long, env = "BATON_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// How long a connection may take to send a request's headers, from
    /// its opening or its previous response; a silent, slow or idle
    /// connection is closed after it.
    #[arg(long, env = "BATON_HTTP_HEADER_TIMEOUT", default_value = "20s", value_parser = humantime::parse_duration)]
    pub http_header_timeout: Duration,
    /// The most HTTP connections this replica keeps open at once; one more
    /// is closed as soon as it is accepted.
    #[arg(long, env = "BATON_MAX_CONNECTIONS", default_value_t = 4096)]
    pub max_connections: usize,
    /// Turns the command executor off: plans with command tasks are
    /// refused, and this replica starts no program.
    #[arg(long, env = "BATON_DISABLE_COMMANDS")]
    pub disable_commands: bool,
    /// Serve the dashboard's bundle (`pkg/`, `favicon.svg`) from this
    /// directory instead of the copy inside the binary: for development,
    /// with `scripts/build-site.sh`'s output of the same build profile.
    #[arg(long, env = "BATON_SITE_ROOT")]
    pub site_root: Option<PathBuf>,
    /// The bundle compiled into the binary (`main` sets it; see build.rs).
    #[arg(skip = &crate::dashboard::assets::Site::EMPTY)]
    pub bundle: &'static crate::dashboard::assets::Site,
}

impl Settings {
    pub fn connection_limits(&self) -> crate::http_server::ConnectionLimits {
        crate::http_server::ConnectionLimits {
            header_timeout: self.http_header_timeout,
            max_connections: self.max_connections,
        }
    }

    pub fn command_policy(&self) -> crate::plan::CommandPolicy {
        crate::plan::CommandPolicy::from_settings(self.disable_commands, &self.allowed_commands)
    }

    /// The command executor this replica runs: its policy, and a
    /// supervisor that kills a command once the replica has been quiet
    /// for half of `stale_after`.
    pub fn command_executor(&self) -> anyhow::Result<crate::executor::CommandExecutor> {
        Ok(crate::executor::CommandExecutor {
            policy: self.command_policy(),
            quiet: self.stale_after / 2,
            env: crate::executor::TaskEnv::new(&self.task_env)?,
            ..Default::default()
        })
    }

    pub fn scheduler(&self) -> SchedulerConfig {
        SchedulerConfig {
            workers: self.workers,
            poll_interval: self.poll_interval,
            heartbeat_interval: self.heartbeat_interval,
            stale_after: self.stale_after,
            shutdown_grace: self.shutdown_grace,
            sweep_interval: self.sweep_interval,
            leader_lease: self.leader_lease,
            max_log_bytes: self.max_log_bytes,
            retain_finished: match self.retain_finished {
                crate::retention::Retain::Forever => None,
                crate::retention::Retain::For(d) => Some(d),
            },
            delivery: DeliveryConfig {
                secret: self
                    .webhook_secret
                    .clone()
                    .filter(|s| !s.expose().is_empty()),
                max_attempts: self.webhook_max_attempts,
            },
        }
    }

    /// Each user's share of the costly reads.
    pub fn search_shares(&self) -> anyhow::Result<crate::fair_share::Shares> {
        anyhow::ensure!(
            self.search_shares_per_user >= 1,
            "BATON_SEARCH_SHARES_PER_USER must be at least 1 (got 0: nobody could search)"
        );
        Ok(crate::fair_share::Shares::new(self.search_shares_per_user))
    }

    /// The replica's request slots and each user's bound, checked.
    pub fn fair_queue(&self) -> anyhow::Result<crate::fair_queue::FairQueue> {
        anyhow::ensure!(
            self.request_slots >= 1,
            "BATON_REQUEST_SLOTS must be at least 1 (got 0: no request could be served)"
        );
        anyhow::ensure!(
            self.requests_per_user >= 1,
            "BATON_REQUESTS_PER_USER must be at least 1 (got 0: nobody could ask anything)"
        );
        Ok(crate::fair_queue::FairQueue::new(
            self.request_slots,
            self.requests_per_user,
        ))
    }

    /// The dashboard's live feed settings, checked.
    pub fn live(&self) -> anyhow::Result<crate::dashboard::live::LiveConfig> {
        crate::dashboard::live::LiveConfig::new(
            self.live_interval,
            self.live_idle_refresh,
            self.live_max_views,
            self.live_max_subscribers,
        )?
        .per_user(self.live_max_per_user)
    }

    /// Where notifications go, for the store.
    pub fn notify_targets(&self) -> anyhow::Result<NotifyTargets> {
        let webhook_url = self.webhook_url.clone().filter(|u| !u.trim().is_empty());
        if let Some(url) = &webhook_url {
            let parsed = reqwest::Url::parse(url)
                .map_err(|e| anyhow::anyhow!("BATON_WEBHOOK_URL `{url}` is not a URL: {e}"))?;
            anyhow::ensure!(
                matches!(parsed.scheme(), "http" | "https"),
                "BATON_WEBHOOK_URL must start with http:// or https:// (got `{url}`)"
            );
        }
        let public_url = self
            .public_url
            .clone()
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| format!("{}://{}", self.scheme(), self.listen));
        // Links in notifications and the cookie's `Secure` flag come from
        // it: `baton.example.com` (no scheme) broke both without a word.
        let parsed = reqwest::Url::parse(public_url.trim())
            .map_err(|e| anyhow::anyhow!("BATON_PUBLIC_URL `{public_url}` is not a URL: {e}"))?;
        anyhow::ensure!(
            matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some(),
            "BATON_PUBLIC_URL must be http:// or https:// and a host (got `{public_url}`)"
        );
        Ok(NotifyTargets {
            webhook_url,
            public_url: public_url.trim_end_matches('/').to_owned(),
        })
    }

    /// `https` when this replica serves TLS itself.
    pub fn scheme(&self) -> &'static str {
        match self.tls_cert {
            Some(_) => "https",
            None => "http",
        }
    }

    /// The TLS acceptor, when a certificate is configured; checked at
    /// start, so a bad file stops it with nothing changed.
    pub fn tls(&self) -> anyhow::Result<Option<tokio_rustls::TlsAcceptor>> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => crate::tls::acceptor(cert, key).map(Some),
            (None, None) => Ok(None),
            _ => {
                anyhow::bail!("BATON_TLS_CERT and BATON_TLS_KEY go together: set both, or neither")
            }
        }
    }

    /// The users file, read and checked; `None` when none is configured.
    pub fn users(&self) -> anyhow::Result<Option<crate::auth::Users>> {
        self.users_file
            .as_deref()
            .filter(|path| !path.as_os_str().is_empty())
            .map(crate::auth::Users::load)
            .transpose()
    }

    /// Settings that parse but cannot be meant: checked at start.
    pub fn check(&self) -> anyhow::Result<()> {
        crate::auth::proxies::TrustedProxies::parse(&self.trusted_proxies)?;
        // A label tells the gates that a live replica can run the tasks
        // pinned to it; a replica without workers cannot, and its label
        // would keep them waiting for it rather than reassigned.
        let labels = self.labels();
        anyhow::ensure!(
            self.workers > 0 || labels.is_empty(),
            "BATON_LABELS ({}) names node labels for tasks this replica would run, but \
             BATON_WORKERS is 0, so it runs none: drop the labels, or give it workers",
            labels.join(",")
        );
        anyhow::ensure!(
            (Duration::from_secs(1)..=Duration::from_secs(3600))
                .contains(&self.http_header_timeout),
            "BATON_HTTP_HEADER_TIMEOUT must be between 1s and 1h, not {}",
            humantime::format_duration(self.http_header_timeout)
        );
        anyhow::ensure!(
            (16..=1_000_000).contains(&self.max_connections),
            "BATON_MAX_CONNECTIONS must be between 16 and 1000000, not {}",
            self.max_connections
        );
        crate::executor::TaskEnv::new(&self.task_env)?;
        anyhow::ensure!(
            self.allowed_commands.is_empty()
                || self.allowed_commands.iter().any(|a| !a.trim().is_empty()),
            "BATON_ALLOWED_COMMANDS names no program (only blanks and commas), which would \
             allow every program; name them, or leave it unset to allow any"
        );
        anyhow::ensure!(
            self.session_ttl >= MIN_SESSION_TTL,
            "BATON_SESSION_TTL must be at least a minute, not {} (every sign-in would end \
             at once)",
            humantime::format_duration(self.session_ttl)
        );
        let periods = [
            self.poll_interval,
            self.heartbeat_interval,
            self.sweep_interval,
        ];
        for ((name, min), value) in MIN_PERIODS.iter().zip(periods) {
            anyhow::ensure!(
                value >= *min,
                "{name} must be at least {}, not {}: shorter, the loop spins and sends the \
                 database a statement every turn",
                humantime::format_duration(*min),
                humantime::format_duration(value)
            );
        }
        anyhow::ensure!(
            self.stale_after >= MIN_STALE_AFTER,
            "BATON_STALE_AFTER must be at least 1s, not {}: a pause that short (a slow \
             commit, a busy CPU) would declare live replicas dead and run their work twice",
            humantime::format_duration(self.stale_after)
        );
        // The failover bound (docs/configuration.md) assumes it: a longer
        // lease leaves a dead leader's promotions and sweeps undone after
        // its runs are known to be stranded.
        anyhow::ensure!(
            self.leader_lease <= self.stale_after,
            "BATON_LEADER_LEASE ({}) must be at most BATON_STALE_AFTER ({}): a dead \
             leader's replacement would take longer than the replica is known dead",
            humantime::format_duration(self.leader_lease),
            humantime::format_duration(self.stale_after)
        );
        Ok(())
    }

    /// Without users anyone who reaches the server may run commands on
    /// it, so it must not be reachable from other machines.
    pub fn check_listen_is_safe(&self, users: Option<&crate::auth::Users>) -> anyhow::Result<()> {
        anyhow::ensure!(
            users.is_some() || self.listen.ip().is_loopback(),
            "BATON_LISTEN is {}, which other machines can reach, and no users are configured: \
             anyone could run commands through this server. Configure users with \
             BATON_USERS_FILE (docs/security.md, \"Authentication\"), or listen on 127.0.0.1.",
            self.listen
        );
        Ok(())
    }

    pub fn labels(&self) -> Vec<String> {
        self.labels
            .iter()
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect()
    }
}

/// The database URL; may hold a password, so it never prints whole.
#[derive(Clone)]
pub struct DatabaseUrl(pub String);

impl std::str::FromStr for DatabaseUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(DatabaseUrl(s.to_owned()))
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::store::redact(&self.0))
    }
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::store::redact(&self.0))
    }
}

/// A default duration as its flag's help shows it and clap parses it
/// (`1s`, `6s`): the constant stays the one definition.
fn duration_text(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}
