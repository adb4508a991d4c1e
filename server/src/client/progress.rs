//! A progress line for long commands (`submit --wait`, `bench --seed`):
//! an `indicatif` bar redrawn in place when stderr is a terminal, and plain
//! lines, one per change, when it is a log or a pipe (CI, `2>file`), where
//! redrawing would leave control characters.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Plain mode prints at most one line this often (and the last state at
/// the end), so a log is not flooded by a fast count.
const PLAIN_EVERY: Duration = Duration::from_secs(5);

pub struct Progress {
    bar: Option<ProgressBar>,
    unit: String,
    started: Instant,
    /// Plain mode: the last line printed and when, and the newest one.
    printed: String,
    printed_at: Option<Instant>,
    latest: String,
}

impl Progress {
    /// `unit` names what is counted ("tasks done", "runs seeded").
    pub fn new(total: u64, unit: &str) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(&format!(
                    "{{elapsed_precise}} [{{bar:30}}] {{pos}}/{{len}} {unit}{{msg}}"
                ))
                .expect("the template is valid")
                .progress_chars("=> "),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Self {
            bar,
            unit: unit.to_owned(),
            started: Instant::now(),
            printed: String::new(),
            printed_at: None,
            latest: String::new(),
        }
    }

    /// Sets the count and the rest of the line (e.g. ", 3 running").
    pub fn update(&mut self, done: u64, total: u64, detail: &str) {
        match &self.bar {
            Some(bar) => {
                bar.set_length(total);
                bar.set_position(done);
                bar.set_message(detail.to_owned());
            }
            None => {
                self.latest = format!("{done}/{total} {}{detail}", self.unit);
                let due = self.printed_at.is_none_or(|at| at.elapsed() >= PLAIN_EVERY);
                if due && self.latest != self.printed {
                    self.print_latest();
                }
            }
        }
    }

    fn print_latest(&mut self) {
        eprintln!(
            "progress: {} ({} s)",
            self.latest,
            self.started.elapsed().as_secs()
        );
        self.printed = self.latest.clone();
        self.printed_at = Some(Instant::now());
    }

    /// Prints a line above the bar (or as is, without one).
    pub fn println(&self, line: &str) {
        let line = super::terminal::safe(line);
        match &self.bar {
            Some(bar) => bar.println(line.as_ref()),
            None => eprintln!("{line}"),
        }
    }

    /// Leaves the last state on screen (or in the log).
    pub fn finish(mut self) {
        match self.bar.take() {
            Some(bar) => bar.finish(),
            None if self.latest != self.printed => self.print_latest(),
            None => {}
        }
    }
}
