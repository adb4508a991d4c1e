//! What a task runs and how: its executor's fields (secrets hidden by the
//! server), its timeout, attempts and backoff, heartbeat settings, start
//! time and pin. The plan page shows it folded under each task's name, the
//! run page open.

use leptos::prelude::*;

use crate::components::time::exact;
use domain::definition::{ExecutorView, TaskDefinition, duration_text};

/// A command's argv as one line a shell would read back: words with
/// spaces or quotes in them single-quoted.
fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The executor's lines: (term, value).
fn executor_lines(executor: &ExecutorView) -> Vec<(&'static str, String)> {
    let names = |list: &[String]| {
        if list.is_empty() {
            "none".to_owned()
        } else {
            format!("{} (values hidden)", list.join(", "))
        }
    };
    match executor {
        ExecutorView::Command {
            argv,
            env_names,
            cwd,
        } => vec![
            ("Runs", shell_words(argv)),
            ("Environment", names(env_names)),
            (
                "Directory",
                cwd.clone()
                    .unwrap_or_else(|| "the replica's own".to_owned()),
            ),
        ],
        ExecutorView::Http {
            url,
            method,
            header_names,
            body_bytes,
            expect,
        } => vec![
            ("Request", format!("{method} {url}")),
            ("Headers", names(header_names)),
            (
                "Body",
                body_bytes.map_or("none".to_owned(), |n| format!("{n} bytes (not shown)")),
            ),
            (
                "Succeeds on",
                if expect.is_empty() {
                    "any 2xx status".to_owned()
                } else {
                    expect
                        .iter()
                        .map(u16::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            ),
        ],
        ExecutorView::Sleep { duration_ms } => vec![("Sleeps", duration_text(*duration_ms))],
        ExecutorView::Custom { name } => vec![("Executor", name.clone())],
    }
}

/// The limits' lines: (term, value).
fn limit_lines(def: &TaskDefinition) -> Vec<(&'static str, String)> {
    let attempts = if def.retry_backoff_ms.is_empty() {
        "1 (no automatic retry)".to_owned()
    } else {
        let waits: Vec<String> = def
            .retry_backoff_ms
            .iter()
            .map(|ms| duration_text(*ms))
            .collect();
        format!("{}, retried after {}", def.max_attempts, waits.join(", "))
    };
    let heartbeat = match (def.heartbeat_interval_ms, def.heartbeat_timeout_ms) {
        (None, None) => "the replica's defaults".to_owned(),
        (interval, timeout) => format!(
            "every {}, stale after {}",
            interval.map_or("(replica default)".to_owned(), duration_text),
            timeout.map_or("(replica default)".to_owned(), duration_text),
        ),
    };
    let mut lines = vec![
        ("Timeout", duration_text(def.timeout_ms)),
        ("Attempts", attempts),
        ("Heartbeat", heartbeat),
    ];
    if let Some(at) = def.run_at {
        lines.push(("Not before", exact(at)));
    }
    if let Some(node) = &def.node {
        let reassign = match def.reassign_after_ms {
            Some(ms) => format!("{node}; any replica after {}", duration_text(ms)),
            None => format!("{node}; never reassigned"),
        };
        lines.push(("Pinned to", reassign));
    }
    lines
}

/// A task's definition as a list of terms.
#[component]
pub fn Definition(definition: TaskDefinition) -> impl IntoView {
    let kind = definition.executor.kind().to_owned();
    let lines = executor_lines(&definition.executor)
        .into_iter()
        .chain(limit_lines(&definition))
        .map(|(term, value)| {
            view! {
                <div class="flex gap-2">
                    <dt class="w-28 shrink-0 text-slate-600">{term}</dt>
                    <dd class="min-w-0 font-mono break-words text-slate-900">{value}</dd>
                </div>
            }
        })
        .collect_view();
    view! {
        <dl class="task-definition space-y-0.5 text-xs" data-executor=kind>
            {lines}
        </dl>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_reads_back_as_shell_words() {
        let argv = ["sh", "-c", "echo it's done", ""].map(str::to_owned);
        assert_eq!(shell_words(&argv), r#"sh -c 'echo it'\''s done' ''"#);
    }
}
