//! One module per page; each holds the server functions it calls.

pub mod audit;
pub mod deliveries;
#[cfg(feature = "ssr")]
pub mod live_views;
pub mod login;
pub mod overview;
pub mod plan;
pub mod plans;
pub mod replicas;
pub mod run;
pub mod runs;
pub mod schedules;
pub mod submit;
pub mod targets;
