//! The bounds every plan field is checked against, in one place so the
//! docs/plan-format.md's table, the validator and the messages cannot drift apart.
//!
//! Each bound keeps stored data inside what both backends and the loops can
//! compute with: a `timeout` of a million years once overflowed PostgreSQL's
//! `interval` and SQLite's integer deadline on every claim, on every
//! replica, and a zero heartbeat interval spun a loop writing the WAL.

use std::time::Duration;

const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(60 * 60);
const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// An inclusive range a duration field must fall in.
#[derive(Debug, Clone, Copy)]
pub struct DurationBounds {
    pub min: Duration,
    pub max: Duration,
}

pub const TIMEOUT: DurationBounds = DurationBounds {
    min: Duration::from_millis(100),
    max: Duration::from_secs(30 * 24 * 60 * 60),
};
pub const HEARTBEAT_INTERVAL: DurationBounds = DurationBounds {
    min: SECOND,
    max: HOUR,
};
pub const HEARTBEAT_TIMEOUT: DurationBounds = DurationBounds {
    min: Duration::from_secs(2),
    max: DAY,
};
pub const REASSIGN_AFTER: DurationBounds = DurationBounds {
    min: SECOND,
    max: Duration::from_secs(365 * 24 * 60 * 60),
};
pub const SLEEP: DurationBounds = DurationBounds {
    min: Duration::ZERO,
    max: Duration::from_secs(30 * 24 * 60 * 60),
};

/// `run_at` must fall within these calendar years (UTC).
pub const RUN_AT_YEARS: (i32, i32) = (1970, 9999);

pub const MAX_ATTEMPTS: i64 = 100;
pub const MAX_PARALLEL_LIMIT: i64 = 1_000_000;
/// Tasks in one plan. A plan is one transaction to submit, cancel or retry,
/// and one page to render; past this, split the work into several plans.
pub const MAX_TASKS: usize = 10_000;
pub const MAX_WEBHOOKS: usize = 10;
/// Dependencies in one plan, counting those a stage implies (every task
/// of a stage on every task of the stage before). Each is a row written at
/// submit and updated once when its task completes.
pub const MAX_DEPENDENCIES: usize = 100_000;
/// Names in one `approvers` list.
pub const MAX_APPROVERS: usize = 100;
/// Characters in a plan, task, target, version or node name.
pub const MAX_NAME_CHARS: usize = 200;
pub const MAX_DESCRIPTION_BYTES: usize = 10_000;
pub const MAX_URL_BYTES: usize = 4096;
pub const MAX_HTTP_BODY_BYTES: usize = 1024 * 1024;
pub const MAX_ARGV: usize = 1024;
/// argv, environment and working directory together, in bytes.
pub const MAX_COMMAND_BYTES: usize = 128 * 1024;
/// A submitted plan document (API or dashboard), in bytes.
pub const MAX_PLAN_BODY_BYTES: usize = 8 * 1024 * 1024;

/// What a `413` says, whichever layer refused the body.
pub fn body_too_large() -> String {
    format!(
        "the body is larger than the limit of {} MiB",
        MAX_PLAN_BODY_BYTES / (1024 * 1024)
    )
}

impl DurationBounds {
    /// `None` when `d` is inside; else what the operator should read.
    pub fn check(&self, field: &str, d: Duration) -> Option<String> {
        if d >= self.min && d <= self.max {
            return None;
        }
        Some(format!(
            "{field} must be between {} and {} (got {})",
            short(self.min),
            short(self.max),
            humantime::format_duration(d)
        ))
    }
}

/// `30d`, `1h`, `100ms`: the bound as an operator would write it.
pub fn short(d: Duration) -> String {
    let units = [(DAY, "d"), (HOUR, "h"), (MINUTE, "m"), (SECOND, "s")];
    for (unit, suffix) in units {
        if d >= unit && d.as_nanos().is_multiple_of(unit.as_nanos()) {
            return format!("{}{suffix}", d.as_nanos() / unit.as_nanos());
        }
    }
    format!("{}ms", d.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_read_as_written() {
        assert_eq!(short(TIMEOUT.min), "100ms");
        assert_eq!(short(TIMEOUT.max), "30d");
        assert_eq!(short(HEARTBEAT_INTERVAL.max), "1h");
        assert_eq!(short(Duration::ZERO), "0ms");
        assert_eq!(short(Duration::from_secs(90)), "90s");
    }

    #[test]
    fn check_names_field_and_bound() {
        assert_eq!(TIMEOUT.check("timeout", Duration::from_secs(60)), None);
        let message = TIMEOUT
            .check("tasks[0].timeout", Duration::from_nanos(1))
            .unwrap();
        assert_eq!(
            message,
            "tasks[0].timeout must be between 100ms and 30d (got 1ns)"
        );
    }
}
