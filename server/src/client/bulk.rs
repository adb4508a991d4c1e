//! What `baton runs --act` and `baton status --act` share: the action's
//! name on the command line, and the question before acting.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::bail;
use domain::search::BulkAction;

pub fn parse_action(text: &str) -> Result<BulkAction, String> {
    BulkAction::parse(text).ok_or_else(|| format!("`{text}` is not retry, cancel or skip"))
}

/// Asks `question` on the terminal about acting on `n` runs; refuses to
/// guess without one, saying how to act on exactly those.
pub fn confirm(question: &str, action: BulkAction, n: i64) -> anyhow::Result<bool> {
    if !std::io::stdin().is_terminal() {
        bail!(
            "{} would be {}; pass --expect {n} to act on exactly those, or --yes",
            run_count(n),
            action.past()
        );
    }
    print!("{question} [y/N] ");
    std::io::stdout().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// "1 run", "12 runs".
pub fn run_count(n: i64) -> String {
    format!("{n} {}", if n == 1 { "run" } else { "runs" })
}
