//! Real `baton serve` processes (this very binary) for the benches that
//! need replicas in processes of their own: `--failover` kills them,
//! `--processes` times a full queue burned down by them.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

use crate::config::Settings;
use crate::store::Store;

/// How often [`ServeProcess::registered`] looks for the heartbeat row.
const POLL: Duration = Duration::from_millis(20);

pub struct ServeProcess {
    pub child: Child,
    /// A label only this process carries, to find its heartbeat row by.
    label: String,
    /// `http://127.0.0.1:PORT`, where it listens.
    pub base: String,
}

impl ServeProcess {
    /// Starts `baton serve` on `url` with `workers` slots, the liveness
    /// and poll settings of `settings`, a port of its own and errors-only
    /// logging; returns at once, before it registers.
    pub fn spawn(settings: &Settings, url: &str, workers: usize) -> anyhow::Result<Self> {
        Self::spawn_with(settings, url, workers, &[])
    }

    /// [`ServeProcess::spawn`] with more settings in its environment.
    pub fn spawn_with(
        settings: &Settings,
        url: &str,
        workers: usize,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let label = format!("bench-{:08x}", fastrand::u32(..));
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let duration = |d: Duration| humantime::format_duration(d).to_string();
        let child = Command::new(std::env::current_exe()?)
            .arg("serve")
            .env("BATON_DATABASE_URL", url)
            .env("BATON_LISTEN", format!("127.0.0.1:{port}"))
            .env("BATON_LABELS", &label)
            .env(
                "BATON_HEARTBEAT_INTERVAL",
                duration(settings.heartbeat_interval),
            )
            .env("BATON_STALE_AFTER", duration(settings.stale_after))
            .env("BATON_SWEEP_INTERVAL", duration(settings.sweep_interval))
            .env("BATON_LEADER_LEASE", duration(settings.leader_lease))
            .env("BATON_POLL_INTERVAL", duration(settings.poll_interval))
            .env("BATON_WORKERS", workers.to_string())
            .env("BATON_LOG", "error")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting a baton serve process")?;
        Ok(ServeProcess {
            child,
            label,
            base: format!("http://127.0.0.1:{port}"),
        })
    }

    /// Waits (up to 30 s) for this process's heartbeat row; its replica id.
    pub async fn registered(&self, store: &dyn Store) -> anyhow::Result<String> {
        registered(store, &self.label).await
    }

    /// The label only this process carries, for [`registered`].
    pub fn label(&self) -> &str {
        &self.label
    }

    /// SIGKILL, and the process reaped.
    pub async fn kill(mut self) -> anyhow::Result<()> {
        self.child.start_kill()?;
        self.child.wait().await?;
        Ok(())
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}

/// Waits (up to 30 s) for the heartbeat row of the process labelled
/// `label`; its replica id.
pub async fn registered(store: &dyn Store, label: &str) -> anyhow::Result<String> {
    let started = Instant::now();
    loop {
        let replicas = store.replica_list().await?;
        if let Some(me) = replicas
            .iter()
            .find(|r| r.info.labels.iter().any(|l| l == label))
        {
            return Ok(me.info.replica_id.clone());
        }
        if started.elapsed() > Duration::from_secs(30) {
            bail!("a baton serve process did not register within 30 s");
        }
        tokio::time::sleep(POLL).await;
    }
}
