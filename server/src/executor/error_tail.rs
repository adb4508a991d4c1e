//! What a failed run's error quotes of its output, so the reason is where
//! people look (the plan page, Recent failures, the runs search's `error`
//! filter, webhooks) and not only in the log: a command's last stderr
//! lines, an HTTP answer's first body lines. Bounded and escaped, since
//! the text is the task's, not Baton's.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// Lines of a command's stderr an error quotes, at most.
pub const TAIL_LINES: usize = 3;

/// Bytes of output an error quotes, at most.
pub const QUOTED_BYTES: usize = 500;

/// Between two quoted lines.
const LINE_BREAK: &str = " ⏎ ";

/// The last [`TAIL_LINES`] non-blank lines a stream wrote, shared with the
/// pump that reads it, so the tail is there even when the pump is left
/// running (a descriptor held open after the command ended).
#[derive(Clone, Default)]
pub struct Tail {
    lines: Arc<Mutex<VecDeque<String>>>,
}

impl Tail {
    /// Keeps `line` (its first [`QUOTED_BYTES`]: no more is ever quoted).
    pub fn push(&self, line: &str) {
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        let mut lines = self.lines.lock().expect("poisoned");
        if lines.len() == TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(cut_after(line, QUOTED_BYTES).to_owned());
    }

    /// `error`, followed by the quoted tail when there is one.
    pub fn quoted_after(&self, error: String) -> String {
        let lines = self.lines.lock().expect("poisoned");
        let joined = lines
            .iter()
            .map(|l| escaped(l))
            .collect::<Vec<_>>()
            .join(LINE_BREAK);
        match joined.is_empty() {
            true => error,
            false => format!("{error}: {}", keep_end(&joined, QUOTED_BYTES)),
        }
    }
}

/// `error`, followed by the start of `body` (its first non-blank lines, at
/// most [`QUOTED_BYTES`]) when there is any.
pub fn with_body_start(error: String, body: &str) -> String {
    let joined = body
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(escaped)
        .take(TAIL_LINES)
        .collect::<Vec<_>>()
        .join(LINE_BREAK);
    if joined.is_empty() {
        return error;
    }
    let start = cut_after(&joined, QUOTED_BYTES);
    let more = if start.len() < joined.len() {
        "…"
    } else {
        ""
    };
    format!("{error}: {start}{more}")
}

/// Control characters (escape sequences, carriage returns) written as
/// escapes, so a quoted line cannot repaint a terminal or a log viewer.
fn escaped(line: &str) -> String {
    line.chars()
        .map(|c| match c.is_control() {
            true => c.escape_default().to_string(),
            false => c.to_string(),
        })
        .collect()
}

/// The first `max` bytes of `text`, cut on a character boundary.
fn cut_after(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The last `max` bytes of `text`, cut on a character boundary and marked
/// when cut.
fn keep_end(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_lines_are_quoted_escaped_and_bounded() {
        let tail = Tail::default();
        assert_eq!(
            tail.quoted_after("exited with code 3".into()),
            "exited with code 3"
        );
        for line in [
            "starting",
            "",
            "  ",
            "step 2",
            "WARN: slow",
            "ERROR: deadlock detected\r",
        ] {
            tail.push(line);
        }
        assert_eq!(
            tail.quoted_after("exited with code 3".into()),
            "exited with code 3: step 2 ⏎ WARN: slow ⏎ ERROR: deadlock detected"
        );
        tail.push("\u{1b}[31mred\u{1b}[0m");
        assert!(
            tail.quoted_after(String::new())
                .ends_with("ERROR: deadlock detected ⏎ \\u{1b}[31mred\\u{1b}[0m")
        );
        let huge = Tail::default();
        huge.push(&"é".repeat(10_000));
        let quoted = huge.quoted_after("e".into());
        assert!(
            quoted.len() <= "e: …".len() + QUOTED_BYTES,
            "{}",
            quoted.len()
        );
        assert!(quoted.starts_with("e: é"));
    }

    #[test]
    fn a_body_is_quoted_from_its_start() {
        assert_eq!(
            with_body_start(
                "unexpected HTTP status 503".into(),
                "\n{\"error\": \"db down\"}\nmore\n"
            ),
            "unexpected HTTP status 503: {\"error\": \"db down\"} ⏎ more"
        );
        assert_eq!(with_body_start("s".into(), " \n "), "s");
        let long = with_body_start("s".into(), &"x".repeat(2_000));
        assert_eq!(long.len(), "s: ".len() + QUOTED_BYTES + "…".len());
    }
}
