//! `baton hash-password` and `baton new-token`: make the secrets the users
//! file holds hashes of, without a server or a database.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{Context, ensure};

use super::secrets::{hash_password, new_token, token_hash};

/// Reads a password from standard input (not echoed, and asked twice, on a
/// terminal) and prints its Argon2id hash for a user's `password_hash`.
pub fn hash_password_command() -> anyhow::Result<()> {
    let password = if std::io::stdin().is_terminal() {
        let first = prompt_hidden("Password: ")?;
        let again = prompt_hidden("Again: ")?;
        ensure!(first == again, "the two passwords differ; nothing printed");
        first
    } else {
        read_line()?
    };
    ensure!(
        !password.is_empty(),
        "the password is empty; nothing printed"
    );
    println!("{}", hash_password(&password)?);
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct NewTokenArgs {
    /// A token for `baton agent`: it opens only the worker protocol.
    /// Prints the entry for the users file's `agents:`.
    #[arg(long)]
    pub agent: bool,
    /// The agent's name (with --agent): its id starts with it.
    #[arg(long, requires = "agent", default_value = "agent")]
    pub name: String,
    /// The labels the agent may carry (with --agent, comma-separated).
    #[arg(long, requires = "agent", value_delimiter = ',')]
    pub labels: Vec<String>,
}

/// Prints a new API token and the hash that goes in a user's
/// `token_hashes` (or, with `--agent`, a whole `agents:` entry). The
/// token itself is stored nowhere: hand it to the client now.
pub fn new_token_command(args: &NewTokenArgs) -> anyhow::Result<()> {
    let token = new_token()?;
    let hash = token_hash(&token).to_text();
    println!("token: {token}");
    if !args.agent {
        println!("token_hash: {hash}");
        return Ok(());
    }
    let labels: Vec<String> = args
        .labels
        .iter()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    super::check_labels(&labels).map_err(|e| anyhow::anyhow!("--labels: {e}"))?;
    // Checked as the users file will check it, before anything prints
    // that could not be used.
    let entry = format!(
        "agents:\n  - name: {}\n    labels: {}\n    token_hashes: [\"{hash}\"]\n",
        args.name,
        serde_json::to_string(&labels)?,
    );
    super::agent_tokens::check_section(&entry)
        .map_err(|(field, message)| anyhow::anyhow!("{field}: {message}"))?;
    println!("# for the users file (BATON_USERS_FILE):");
    print!("{entry}");
    Ok(())
}

fn read_line() -> anyhow::Result<String> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("cannot read the password from standard input")?;
    Ok(line.trim_end_matches(['\n', '\r']).to_owned())
}

/// Reads a line from the terminal with echo off, restoring it after.
fn prompt_hidden(prompt: &str) -> anyhow::Result<String> {
    eprint!("{prompt}");
    std::io::stderr().flush().ok();
    let fd = libc::STDIN_FILENO;
    // SAFETY: `termios` is plain data; tcgetattr fills it or fails.
    let mut saved: libc::termios = unsafe { std::mem::zeroed() };
    let echo_off = unsafe { libc::tcgetattr(fd, &mut saved) } == 0 && {
        let mut quiet = saved;
        quiet.c_lflag &= !libc::ECHO;
        // SAFETY: sets the attributes just read, minus echo.
        unsafe { libc::tcsetattr(fd, libc::TCSANOW, &quiet) == 0 }
    };
    let line = read_line();
    if echo_off {
        // SAFETY: restores what tcgetattr returned.
        unsafe { libc::tcsetattr(fd, libc::TCSANOW, &saved) };
    }
    eprintln!();
    line
}
