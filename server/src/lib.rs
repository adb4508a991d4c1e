//! Baton: a highly available task scheduler with an operator dashboard.
//!
//! Every replica of the `baton` binary runs the scheduling loops in-process
//! and serves the REST API and the Leptos dashboard; replicas coordinate
//! only through the database.
//!
//! Layout (the walk of one run is in `docs/architecture.md`):
//! - [`plan`]: plan files (JSON/YAML), their validation and limits.
//! - [`store`]: the [`store::Store`] seam; its rules written once in
//!   `store/engine/` over a PostgreSQL and a SQLite dialect; the promotion
//!   gates ([`store::gates`]).
//! - [`schedule`]: schedule files, cron timing and plan templates.
//! - [`scheduler`]: promoter, claimer and worker loops, the ownership
//!   watchdog and loop health.
//! - [`liveness`]: replica heartbeat, leader lease, sweeper;
//!   [`retention`]: pruning finished plans.
//! - [`executor`]: `command` (under its supervisor), `http`, `sleep`.
//! - [`notifications`]: the webhook deliverer and signatures.
//! - [`run_filter`]: the runs search's filter, checked; [`audit_filter`]:
//!   the audit log's; [`plan_filter`]: the plans list's, for bulk actions.
//! - [`actions`]: operator actions, one dispatch for the API and the
//!   dashboard.
//! - [`api`]: the REST API; [`dashboard`]: the Leptos routes; [`auth`]:
//!   users, roles, sessions and the guard in front of both.
//! - [`client`]: `baton submit` and `baton status`, clients of the API.
//! - [`cli`], [`config`]: the command line and the settings it shares.
//! - [`serve`]: starting a replica; [`http_server`]: the HTTP server with
//!   its connection bounds; [`telemetry`]: logs.
//! - [`bench`]: `baton bench` (throughput, latency, render, failover).
//! - [`secret`]: values that never print; [`faults`]: fault injection the
//!   tests switch on.

pub mod actions;
pub mod api;
pub mod auth;
pub mod bench;
pub mod body_limit;
pub mod cli;
pub mod client;
pub mod config;
pub mod dashboard;
pub mod executor;
pub mod fair_queue;
pub mod fair_share;
pub mod faults;
pub mod http_server;
pub mod loops;
pub mod plan;
pub mod replica_views;
pub mod retention;
pub mod schedule;
pub mod secret;
pub mod serve;
pub mod store;
pub mod telemetry;
pub mod webhook_signature;
