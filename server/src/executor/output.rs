//! Bounds on what one execution may write to its log, and the reading of
//! a child's pipe within them.
//!
//! A command printing one 100 MB line once pushed a replica to 1.5 GB and
//! its run page to 200 MB of HTML; a NUL byte made PostgreSQL refuse the
//! log batch on every retry. So: a line is cut at [`MAX_LINE_BYTES`], a
//! run keeps at most `--max-log-bytes` ([`DEFAULT_MAX_RUN_LOG_BYTES`]),
//! each cut is marked in the log, and NUL is stored as `␀` (U+2400) on
//! both backends.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use super::LogSink;
use super::error_tail::Tail;

/// One log line, in bytes; the rest of the line is dropped and marked.
pub const MAX_LINE_BYTES: usize = 16 * 1024;
/// One run's whole log by default (`--max-log-bytes`), in bytes; later
/// output is dropped and marked.
pub const DEFAULT_MAX_RUN_LOG_BYTES: usize = 1024 * 1024;
/// The bounds of `--max-log-bytes`: room for a few hundred lines at least,
/// and at most what a run page could still show.
pub const MAX_RUN_LOG_BOUNDS: (usize, usize) = (4 * 1024, 1024 * 1024 * 1024);
/// What one stored line costs besides its text (row, index, timestamp),
/// so that a flood of empty lines is bounded too.
pub const LINE_OVERHEAD_BYTES: usize = 64;

/// The bytes a run may still log, shared by its stdout and stderr.
#[derive(Clone, Debug)]
pub struct Budget {
    limit: usize,
    left: Arc<AtomicUsize>,
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new(DEFAULT_MAX_RUN_LOG_BYTES)
    }
}

/// What the budget said about one line.
#[derive(Debug, PartialEq, Eq)]
pub enum Charge {
    Keep,
    /// This line is the first over the cap: log the cut marker instead.
    JustRanOut,
    Drop,
}

impl Budget {
    pub fn new(limit: usize) -> Self {
        Budget {
            limit,
            left: Arc::new(AtomicUsize::new(limit)),
        }
    }

    /// The marker logged in place of everything past the cap.
    pub fn cut_marker(&self) -> String {
        format!(
            "[baton: output cut here: this run's log reached {} (--max-log-bytes); later output is discarded]",
            bytes_text(self.limit)
        )
    }

    pub fn charge(&self, bytes: usize) -> Charge {
        let cost = bytes + LINE_OVERHEAD_BYTES;
        let before = self
            .left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                Some(left.saturating_sub(cost))
            })
            .expect("the closure always answers");
        if before >= cost {
            Charge::Keep
        } else if before > 0 {
            Charge::JustRanOut
        } else {
            Charge::Drop
        }
    }
}

/// `1 MiB`, `512 KiB`, `1000 bytes`: a size as an operator wrote it.
pub fn bytes_text(bytes: usize) -> String {
    const KIB: usize = 1024;
    match bytes {
        b if b >= KIB * KIB && b % (KIB * KIB) == 0 => format!("{} MiB", b / (KIB * KIB)),
        b if b >= KIB && b % KIB == 0 => format!("{} KiB", b / KIB),
        b => format!("{b} bytes"),
    }
}

/// Reads `--max-log-bytes`: a byte count, or one with `KiB`, `MiB` or
/// `GiB` (`K`, `M`, `G` and `KB`, `MB`, `GB` read the same), within
/// [`MAX_RUN_LOG_BOUNDS`].
pub fn parse_log_limit(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let unit_bytes: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1024,
        "m" | "mb" | "mib" => 1024 * 1024,
        "g" | "gb" | "gib" => 1024 * 1024 * 1024,
        _ => {
            return Err(format!(
                "`{text}`: unknown unit `{}`; write e.g. 1MiB, 512KiB or 1048576",
                unit.trim()
            ));
        }
    };
    let bytes = digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit_bytes))
        .ok_or_else(|| format!("`{text}` is not a size; write e.g. 1MiB, 512KiB or 1048576"))?;
    let (min, max) = MAX_RUN_LOG_BOUNDS;
    if !(min..=max).contains(&bytes) {
        return Err(format!(
            "`{text}` is outside {} to {}",
            bytes_text(min),
            bytes_text(max)
        ));
    }
    Ok(bytes)
}

/// A line as it is stored: NUL shown as `␀`, at most [`MAX_LINE_BYTES`]
/// (cut on a character boundary, with a marker when cut).
pub fn clean_line(line: &str) -> String {
    let mut line = line.replace('\0', "\u{2400}");
    if line.len() > MAX_LINE_BYTES {
        let mut end = MAX_LINE_BYTES;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push_str(&format!(
            " [baton: line cut at {} KiB]",
            MAX_LINE_BYTES / 1024
        ));
    }
    line
}

/// Forwards a pipe to the log line by line, holding at most
/// [`MAX_LINE_BYTES`] of one line in memory however long it is; bytes that
/// are not UTF-8 are replaced rather than ending the capture. `tail`, when
/// given, keeps the last lines for the run's error.
pub async fn pump(
    pipe: Option<impl AsyncRead + Unpin>,
    stream: &'static str,
    log: LogSink,
    tail: Option<Tail>,
) {
    let Some(pipe) = pipe else { return };
    let mut reader = BufReader::new(pipe);
    let mut line: Vec<u8> = Vec::new();
    // Past the cap of the current line: discard until its newline.
    let mut skipping = false;
    loop {
        let chunk = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(chunk) => chunk,
        };
        let (taken, ends_line) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !skipping {
            let room = (MAX_LINE_BYTES + 1).saturating_sub(line.len());
            line.extend_from_slice(&chunk[..taken.min(room)]);
        }
        reader.consume(taken);
        if ends_line {
            if !skipping {
                emit(&log, stream, &line, tail.as_ref());
            }
            line.clear();
            skipping = false;
        } else if !skipping && line.len() > MAX_LINE_BYTES {
            // Keep one byte over the cap so `clean_line` marks the cut.
            emit(&log, stream, &line, tail.as_ref());
            line.clear();
            skipping = true;
        }
    }
    if !line.is_empty() && !skipping {
        emit(&log, stream, &line, tail.as_ref());
    }
}

fn emit(log: &LogSink, stream: &'static str, bytes: &[u8], tail: Option<&Tail>) {
    let text = String::from_utf8_lossy(bytes);
    let line = text.trim_end_matches(['\n', '\r']);
    if let Some(tail) = tail {
        tail.push(line);
    }
    log.line(stream, line);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_cleaned_and_cut_on_a_character_boundary() {
        assert_eq!(clean_line("a\0b"), "a\u{2400}b");
        let long = "é".repeat(MAX_LINE_BYTES);
        let cut = clean_line(&long);
        assert!(cut.len() < MAX_LINE_BYTES + 64);
        assert!(cut.ends_with("[baton: line cut at 16 KiB]"));
        assert_eq!(clean_line("short"), "short");
    }

    #[test]
    fn the_budget_marks_the_first_line_over_and_drops_the_rest() {
        let budget = Budget::default();
        assert_eq!(budget.charge(DEFAULT_MAX_RUN_LOG_BYTES - 100), Charge::Keep);
        assert_eq!(budget.charge(1000), Charge::JustRanOut);
        assert_eq!(budget.charge(0), Charge::Drop);
        assert!(
            budget
                .cut_marker()
                .contains("reached 1 MiB (--max-log-bytes)")
        );
        let small = Budget::new(8 * 1024);
        assert_eq!(small.charge(9 * 1024), Charge::JustRanOut);
        assert!(small.cut_marker().contains("reached 8 KiB"));
    }

    #[test]
    fn log_limits_read_as_written_and_absurd_ones_are_refused() {
        assert_eq!(parse_log_limit("1MiB"), Ok(1024 * 1024));
        assert_eq!(parse_log_limit("512 KiB"), Ok(512 * 1024));
        assert_eq!(parse_log_limit("2m"), Ok(2 * 1024 * 1024));
        assert_eq!(parse_log_limit("1048576"), Ok(1024 * 1024));
        assert_eq!(parse_log_limit("1GiB"), Ok(1024 * 1024 * 1024));
        for bad in [
            "",
            "0",
            "1",
            "2GiB",
            "-1MiB",
            "1.5MiB",
            "lots",
            "1 TiB",
            "99999999999999999999",
        ] {
            let err = parse_log_limit(bad).unwrap_err();
            assert!(err.contains(&format!("`{bad}`")), "{bad}: {err}");
        }
    }

    #[tokio::test]
    async fn a_huge_line_is_held_at_the_cap_and_the_next_line_survives() {
        let (log, mut rx) = LogSink::new(DEFAULT_MAX_RUN_LOG_BYTES);
        let mut input = vec![b'x'; 10 * MAX_LINE_BYTES];
        input.extend_from_slice(b"\nnext\nlast");
        pump(Some(&input[..]), "stdout", log, None).await;
        let first = rx.recv().await.unwrap().line;
        assert!(
            first.ends_with("[baton: line cut at 16 KiB]"),
            "{}",
            &first[first.len() - 40..]
        );
        assert!(first.len() < MAX_LINE_BYTES + 64);
        assert_eq!(rx.recv().await.unwrap().line, "next");
        assert_eq!(rx.recv().await.unwrap().line, "last");
    }
}
