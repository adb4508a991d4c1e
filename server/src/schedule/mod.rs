//! Schedules: plans made from a template on a cron expression in a time
//! zone (docs/design.md, "Schedules").
//!
//! A schedule file is JSON or YAML:
//!
//! ```yaml
//! name: nightly-vacuum
//! cron: "30 2 * * *"          # five fields, six with seconds, or @daily
//! time_zone: Europe/Berlin    # IANA name; default UTC
//! overlap: skip               # skip | queue | allow; default skip
//! catch_up: latest            # none | latest | all; default latest
//! catch_up_limit: 10          # with `all`: at most this many missed ticks
//! params: {db: orders}        # filled into ${db}
//! plan: { name: "vacuum ${db} ${date}", tasks: [...] }
//! ```
//!
//! The leader turns each due tick into exactly one plan
//! (`store::engine::schedules`); this module validates files ([`file`]),
//! fills parameters ([`template`]) and computes ticks ([`timing`]).

mod file;
pub mod hidden;
pub mod template;
pub mod timing;

use std::collections::BTreeMap;

use serde_json::Value;

pub use self::file::{parse_json, parse_text, parse_yaml};
pub use self::timing::{Due, Timing};
use crate::plan::{InvalidPlan, NewPlan};
use domain::time::Ts;

/// Missed ticks `catch_up: all` fires when the file names no limit.
pub const DEFAULT_CATCH_UP_LIMIT: u32 = 10;
/// The most `catch_up_limit` may be: each is a plan made in one round.
pub const MAX_CATCH_UP_LIMIT: u32 = 1_000;
/// Parameters per schedule, and characters per value.
pub const MAX_PARAMS: usize = 100;
pub const MAX_PARAM_CHARS: usize = 4_096;

/// What to do with a tick while the schedule's previous plan is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    /// Make no plan for the tick; record it as skipped.
    Skip,
    /// Make the plan but start it only once the previous one has closed.
    Queue,
    /// Make and start the plan beside the previous one.
    Allow,
}

impl Overlap {
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::Queue => "queue",
            Overlap::Allow => "allow",
        }
    }

    pub fn parse(text: &str) -> Option<Overlap> {
        match text {
            "skip" => Some(Overlap::Skip),
            "queue" => Some(Overlap::Queue),
            "allow" => Some(Overlap::Allow),
            _ => None,
        }
    }
}

/// Which ticks missed while no replica led (more than the grace late)
/// still fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUp {
    None,
    /// Only the most recent missed tick.
    Latest,
    /// The most recent `limit` missed ticks, oldest first.
    All {
        limit: u32,
    },
}

impl CatchUp {
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::None => "none",
            CatchUp::Latest => "latest",
            CatchUp::All { .. } => "all",
        }
    }

    /// How many of the most recent missed ticks fire.
    pub fn keeps(self) -> usize {
        match self {
            CatchUp::None => 0,
            CatchUp::Latest => 1,
            CatchUp::All { limit } => limit as usize,
        }
    }

    /// From the stored pair (`catch_up`, `catch_up_limit`).
    pub fn from_parts(text: &str, limit: i64) -> Option<CatchUp> {
        match text {
            "none" => Some(CatchUp::None),
            "latest" => Some(CatchUp::Latest),
            "all" => u32::try_from(limit)
                .ok()
                .map(|limit| CatchUp::All { limit }),
            _ => None,
        }
    }

    pub fn limit(self) -> i64 {
        self.keeps() as i64
    }
}

/// A schedule that passed validation.
#[derive(Debug, Clone)]
pub struct NewSchedule {
    pub name: String,
    pub cron: String,
    pub time_zone: String,
    pub overlap: Overlap,
    pub catch_up: CatchUp,
    pub params: BTreeMap<String, String>,
    /// The plan document with its `${…}` still in place.
    pub template: Value,
    pub timing: Timing,
}

impl NewSchedule {
    /// The plan tick `at` makes (or a trigger at `at`).
    pub fn plan_at(&self, at: Ts) -> Result<NewPlan, InvalidPlan> {
        render(&self.name, &self.template, &self.params, &self.timing, at)
    }
}

/// Fills the template for tick `at` and validates it as a plan; errors
/// name the field inside `plan`.
pub fn render(
    name: &str,
    template: &Value,
    params: &BTreeMap<String, String>,
    timing: &Timing,
    at: Ts,
) -> Result<NewPlan, InvalidPlan> {
    let mut all = params.clone();
    all.insert("schedule".into(), name.to_owned());
    all.insert(
        "tick".into(),
        at.0.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    );
    all.insert(
        "date".into(),
        at.0.with_timezone(&timing.zone())
            .format("%Y-%m-%d")
            .to_string(),
    );
    let filled = template::fill(template, &all)?;
    crate::plan::parse_value(filled).map_err(|e| InvalidPlan {
        message: e.message,
        field: Some(match e.field {
            Some(field) if field.starts_with('[') => format!("plan{field}"),
            Some(field) => format!("plan.{field}"),
            None => "plan".to_owned(),
        }),
    })
}
