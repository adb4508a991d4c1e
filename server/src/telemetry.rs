//! Logging: `RUST_LOG`-style filtering via `BATON_LOG` (default `info`),
//! to standard output, in colour only on a terminal.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

pub fn init() {
    let filter =
        EnvFilter::try_from_env("BATON_LOG").unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(colour(
            std::io::stdout().is_terminal(),
            std::env::var_os("NO_COLOR"),
        ))
        .try_init();
}

/// Colour escapes only for a person at a terminal: a log file, a pipe or
/// the journal would keep them as noise, and `NO_COLOR` (set, not empty)
/// turns them off anyway (no-color.org).
fn colour(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some("".into())));
        assert!(!colour(true, Some("1".into())));
        assert!(!colour(false, None));
    }
}
