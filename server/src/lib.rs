//! Baton: a highly available task scheduler with an operator dashboard.
//!
//! Every replica of the `baton` binary runs the scheduling loops in-process
//! and serves the REST API and the Leptos dashboard; replicas coordinate
//! only through the database.
//!
//! Layout:
//! - [`plan`]: plan files (JSON/YAML) and their validation.
//! - [`store`]: the store seam, its PostgreSQL and SQLite backends, the
//!   promotion gates.
//! - [`scheduler`]: promoter, claimer and worker loops.
//! - [`executor`]: `command`, `http`, `sleep`, and the trait for more.
//! - [`liveness`]: replica heartbeat.
//! - [`api`]: the REST API; [`dashboard`]: the Leptos routes; [`auth`]:
//!   users, roles, sessions and the guard in front of both.
//! - [`client`]: `baton submit` and `baton status`, clients of the API.
//! - [`serve`], [`bench`], [`config`], [`telemetry`]: the binary's edges.

pub mod actions;
pub mod api;
pub mod auth;
pub mod bench;
pub mod cli;
pub mod client;
pub mod config;
pub mod dashboard;
pub mod executor;
pub mod faults;
pub mod liveness;
pub mod notifications;
pub mod plan;
pub mod scheduler;
pub mod secret;
pub mod serve;
pub mod store;
pub mod telemetry;
