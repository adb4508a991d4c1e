//! `baton agent`'s settings: where the replicas are, the token, and what
//! this machine runs. Liveness timings are not among them: the replicas'
//! own come with the hello, so the sweeper and the agent judge by one
//! clock.

use std::time::Duration;

use clap::Args;

use crate::loops::MAX_WORKERS;
use crate::secret::Secret;

#[derive(Args, Debug, Clone)]
pub struct AgentArgs {
    /// Replicas to reach (comma-separated base URLs, or one load
    /// balancer's), e.g. `https://baton-1:3000,https://baton-2:3000`.
    #[arg(
        long,
        env = "BATON_AGENT_SERVER",
        value_delimiter = ',',
        required = true
    )]
    pub server: Vec<String>,
    /// The agent token (`baton new-token --agent`); none for a server
    /// without users, on this machine.
    #[arg(long, env = "BATON_AGENT_TOKEN", hide_env_values = true)]
    pub token: Option<Secret>,
    /// A PEM file of certificate authorities to trust beside the system's,
    /// for replicas whose certificate a private CA signed.
    #[arg(long, env = "BATON_CA_CERT")]
    pub ca_cert: Option<std::path::PathBuf>,
    /// Node labels this agent carries (comma-separated): it takes the
    /// tasks pinned to them. The token must allow each one.
    #[arg(long, env = "BATON_LABELS", value_delimiter = ',')]
    pub labels: Vec<String>,
    /// Executions this agent runs at once.
    #[arg(long, env = "BATON_WORKERS", default_value_t = crate::loops::DEFAULT_WORKERS)]
    pub workers: usize,
    /// How long shutdown lets running executions finish before their runs
    /// are handed back.
    #[arg(long, env = "BATON_SHUTDOWN_GRACE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
    /// Programs a command task may start here (comma-separated `argv[0]`s).
    /// Unset: any program.
    #[arg(long, env = "BATON_ALLOWED_COMMANDS", value_delimiter = ',')]
    pub allowed_commands: Vec<String>,
    /// This machine starts no program: command tasks given to it fail.
    #[arg(long, env = "BATON_DISABLE_COMMANDS")]
    pub disable_commands: bool,
    /// Variables of this agent's environment that commands inherit
    /// (comma-separated names), beside the usual PATH, HOME and locale.
    #[arg(long, env = "BATON_TASK_ENV", value_delimiter = ',')]
    pub task_env: Vec<String>,
}

impl AgentArgs {
    /// The replicas' base URLs, checked; warns of plain HTTP to another
    /// machine (the token would travel in clear).
    pub fn servers(&self) -> anyhow::Result<Vec<String>> {
        let mut servers = Vec::new();
        for text in self
            .server
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
        {
            let url = reqwest::Url::parse(text).map_err(|e| {
                anyhow::anyhow!(
                    "--server `{text}` is not a URL ({e}); write e.g. https://baton:3000"
                )
            })?;
            anyhow::ensure!(
                matches!(url.scheme(), "http" | "https") && url.host().is_some(),
                "--server `{text}` must be an http:// or https:// URL with a host"
            );
            anyhow::ensure!(
                url.query().is_none() && url.username().is_empty() && url.password().is_none(),
                "--server `{text}` must not carry a query or credentials; give the token with --token"
            );
            if url.scheme() == "http" && !is_loopback(&url) {
                tracing::warn!(
                    server = text,
                    "the agent reaches this replica over plain HTTP: its token and the runs' \
                     output travel unencrypted; use https:// (or a TLS proxy)"
                );
            }
            servers.push(text.trim_end_matches('/').to_owned());
        }
        anyhow::ensure!(!servers.is_empty(), "--server names no replica");
        Ok(servers)
    }

    /// The certificate authorities `--ca-cert` adds (none without it).
    pub fn extra_roots(&self) -> anyhow::Result<Vec<reqwest::Certificate>> {
        self.ca_cert
            .as_deref()
            .map(crate::tls::extra_roots)
            .transpose()
            .map(Option::unwrap_or_default)
    }

    pub fn labels(&self) -> anyhow::Result<Vec<String>> {
        let labels: Vec<String> = self
            .labels
            .iter()
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect();
        crate::auth::check_labels(&labels).map_err(|e| anyhow::anyhow!("--labels: {e}"))?;
        Ok(labels)
    }

    pub fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (1..=MAX_WORKERS).contains(&self.workers),
            "--workers must be from 1 to {MAX_WORKERS}, not {} (an agent that runs nothing has \
             nothing to do)",
            self.workers
        );
        anyhow::ensure!(
            self.shutdown_grace <= Duration::from_secs(24 * 3600),
            "--shutdown-grace must be at most a day"
        );
        crate::executor::TaskEnv::new(&self.task_env)?;
        self.extra_roots()?;
        self.servers()?;
        self.labels()?;
        Ok(())
    }

    /// The command executor: its supervisor kills a command once this
    /// agent has been quiet for half of the replicas' `stale_after`.
    pub fn command_executor(
        &self,
        stale_after: Duration,
    ) -> anyhow::Result<crate::executor::CommandExecutor> {
        Ok(crate::executor::CommandExecutor {
            policy: crate::plan::CommandPolicy::from_settings(
                self.disable_commands,
                &self.allowed_commands,
            ),
            quiet: stale_after / 2,
            env: crate::executor::TaskEnv::new(&self.task_env)?,
            ..Default::default()
        })
    }
}

fn is_loopback(url: &reqwest::Url) -> bool {
    url.host_str().is_some_and(|host| {
        host.eq_ignore_ascii_case("localhost")
            || host
                .trim_matches(['[', ']'])
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    })
}
