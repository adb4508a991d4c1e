//! Baton's domain, below both the server and the dashboard: what a plan,
//! a task and a run are and which statuses they move through
//! (docs/design.md), the JSON shapes the API, the CLI and the dashboard
//! share, the filters of the searches and the natural order of versions.
//! Nothing here touches a database, a socket or a page, so the rules can
//! be read, and tested, on their own.

pub mod audit;
pub mod definition;
pub mod filter;
pub mod gates;
pub mod liveness;
pub mod model;
pub mod query;
pub mod search;
pub mod time;
pub mod version;
pub mod views;
