//! `baton submit`, `status`, `runs`, `logs`, `audit`, `retry`, `cancel`,
//! `skip`, `approve`, `pause`, `resume`, `target` and `schedule`: the
//! operator's command line, a client of a running server's REST API.
//!
//! They talk HTTP rather than open the database themselves so a plan passes
//! the same validation as any other submit and wakes the replicas at once,
//! and so the commands work from any machine that can reach a replica.

mod api_client;
mod audit;
mod bulk;
mod logs;
mod plan_export;
pub mod progress;
mod render;
mod runs;
mod schedules;
mod status;
mod submit;
mod task_actions;
mod terminal;
mod workflow;

use clap::Args;

pub use self::api_client::{ApiClient, PlanFormat};
pub use self::audit::{AuditArgs, audit};
pub use self::logs::{LogsArgs, logs};
pub use self::plan_export::{PlanArgs, plan};
pub use self::runs::{RunsArgs, runs};
pub use self::schedules::{ScheduleArgs, schedule};
pub use self::status::{StatusArgs, status};
pub use self::submit::{SubmitArgs, submit};
pub use self::task_actions::{TaskAction, TaskActionArgs, task_action};
pub use self::workflow::{
    ListArgs, PlanArg, TargetArgs, WorkersArgs, WorkersCommand, pause, paused, target, workers,
};

/// Prints text made of the server's answers on standard output, with
/// anything that would steer the terminal shown as text.
fn show(text: &str) {
    print!("{}", terminal::safe(text));
}

/// Which server the client commands talk to.
#[derive(Args, Debug, Clone)]
pub struct ServerArg {
    /// Base URL of a running `baton serve`. Default: http://<BATON_LISTEN>,
    /// with an unspecified address (0.0.0.0, ::) read as loopback.
    #[arg(long = "server", env = "BATON_SERVER")]
    pub url: Option<String>,
    /// API token (`baton new-token`) when the server has users.
    #[arg(long, env = "BATON_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// A PEM file of certificate authorities to trust beside the system's,
    /// for a server whose certificate a private CA signed.
    #[arg(long, env = "BATON_CA_CERT")]
    pub ca_cert: Option<std::path::PathBuf>,
}

impl ServerArg {
    /// A client of the server this names.
    pub fn client(&self, listen: std::net::SocketAddr) -> anyhow::Result<ApiClient> {
        let roots = self
            .ca_cert
            .as_deref()
            .map(crate::tls::extra_roots)
            .transpose()?
            .unwrap_or_default();
        ApiClient::new(self.base(listen), self.token.as_deref(), &roots)
    }

    /// The base URL, without a trailing slash.
    pub fn base(&self, listen: std::net::SocketAddr) -> String {
        match self.url.as_deref().map(str::trim).filter(|u| !u.is_empty()) {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => {
                let mut addr = listen;
                if addr.ip().is_unspecified() {
                    addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
                }
                format!("http://{addr}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_defaults_to_the_listen_address_on_loopback() {
        let none = ServerArg {
            url: None,
            token: None,
            ca_cert: None,
        };
        assert_eq!(
            none.base("127.0.0.1:3000".parse().unwrap()),
            "http://127.0.0.1:3000"
        );
        assert_eq!(
            none.base("0.0.0.0:8080".parse().unwrap()),
            "http://127.0.0.1:8080"
        );
        let given = ServerArg {
            url: Some("https://baton.example/ ".into()),
            token: None,
            ca_cert: None,
        };
        assert_eq!(
            given.base("127.0.0.1:3000".parse().unwrap()),
            "https://baton.example"
        );
    }
}
