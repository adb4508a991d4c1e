//! Baton: a highly available task scheduler with an operator dashboard.
//!
//! Every replica of the `baton` binary runs the scheduling loops in-process
//! and serves the REST API and the Leptos dashboard; replicas coordinate
//! only through the database.
//!
//! Layout (the walk of one run is in `docs/architecture.md`). The rules
//! that need no database (statuses, gates, time, filters) are the
//! `domain` crate's, below this one and the dashboard.
//! - [`plan`]: plan files (JSON/YAML), their validation and limits;
//!   [`plan_export`]: a stored plan as its tasks' definitions (secrets
//!   hidden) and as the file that submits it again.
//! - [`store`]: the [`store::Store`] seam; its rules written once in
//!   `store/engine/` over a PostgreSQL and a SQLite dialect.
//! - [`schedule`]: schedule files, cron timing and plan templates.
//! - [`loops`]: every loop a replica runs (promoter, claimer, worker,
//!   heartbeats, clock sync, leader lease, sweeper, deliverer, pruner,
//!   schedule ticker), one file each, and their health.
//! - [`executor`]: `command` (under its supervisor), `http`, `sleep`.
//! - [`retention`]: what pruning keeps, and `baton prune`.
//! - [`actions`]: operator actions, one dispatch for the API and the
//!   dashboard.
//! - [`api`]: the REST API; [`dashboard`]: the Leptos routes; [`auth`]:
//!   users, roles, sessions and the guard in front of both;
//!   [`fair_queue`], [`fair_share`], [`body_limit`]: what one client may
//!   take of a replica.
//! - [`client`]: `baton submit`, `status` and the other API clients.
//! - [`agent`]: `baton agent`, a worker on another machine, and the
//!   worker protocol it speaks with the replicas (`api/worker.rs`).
//! - [`cli`], [`config`]: the command line and the settings it shares.
//! - [`serve`]: starting a replica; [`version`], [`stop_signal`]: what
//!   it and an agent share; [`http_server`]: the HTTP server with
//!   its connection bounds; [`telemetry`]: logs.
//! - [`bench`]: `baton bench` and the throw-away databases tests use.
//! - [`secret`]: values that never print; [`faults`]: fault injection the
//!   tests switch on; [`webhook_signature`], [`replica_views`].

pub mod actions;
pub mod agent;
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
pub mod plan_export;
pub mod prune_command;
pub mod refusal;
pub mod replica_views;
pub mod retention;
pub mod schedule;
pub mod secret;
pub mod serve;
pub mod stop_signal;
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod version;
pub mod webhook_signature;
