//! Which build this is: `baton --version`, every replica's and agent's
//! heartbeat row, and the agent's hello.

/// The version of the package; replicas report [`VERSION_LONG`], which
/// names the commit too, so a rolling upgrade shows which build each runs.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `baton --version`: the version and the commit built (from `build.rs`).
pub const VERSION_LONG: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("BATON_GIT_COMMIT"),
    ")"
);
