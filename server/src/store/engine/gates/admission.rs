//! Admission (docs/design.md, "Admission"): a submitted run that the next
//! round would certainly promote is written AVAILABLE at once, its
//! creation and promotion both stamped in the submit, instead of PENDING
//! and then promoted by a second write of its row.
//!
//! "Certainly" is kept narrow, so the answer never differs from the
//! round's: the run has no start time, version, node or workflow gate,
//! is shared, its plan has no parallel limit, no capacity or pause is set
//! on its target, and no exclusive run (of this plan or a live one of
//! another) holds or waits for the target, so nothing can reserve it.
//! Every other run is PENDING, as before, for the round; so is every run
//! of a plan with fewer than [`crate::plan::MIN_ADMITTED_RUNS`] tasks
//! (admission's fixed price would not pay) or over
//! [`crate::plan::MAX_ADMITTED_EXCLUSIVE_TARGETS`] exclusive targets,
//! which the statement compares each task with. The submit
//! decides only while it holds the promotion lock with its reads made
//! after taking it (each backend's `plan_write`), so a round, a pause or
//! a capacity change cannot interleave with it: admission is a round of
//! its own for the submit's runs.

/// The condition that a run is admitted, for the task row `$t` (an alias
/// and its dot, e.g. `"t."`); `$apart` is the backend's condition that
/// its target is none of [`NewPlan::exclusive_targets`] (bound as an
/// argument: probing the plan's other tasks per task would be quadratic
/// in the plan's size). The index `task_run_live_exclusive` serves the
/// probe of live exclusive runs, through the column `live_exclusive_target`
/// that the database derives from the run's status (its target while the
/// run is exclusive and PENDING, AVAILABLE or RUNNING, else NULL).
///
/// [`NewPlan::exclusive_targets`]: crate::plan::NewPlan::exclusive_targets
macro_rules! admitted_sql {
    ($t:literal, $apart:literal) => {
        concat!(
            "(NOT ",
            $t,
            "exclusive AND ",
            $t,
            "version IS NULL AND ",
            $t,
            "node IS NULL AND ",
            $t,
            "run_at IS NULL AND ",
            $apart,
            "
            AND NOT EXISTS (SELECT 1 FROM target_setting s WHERE s.target = ",
            $t,
            "target
                AND (s.paused_by IS NOT NULL OR s.capacity IS NOT NULL))
            AND NOT EXISTS (SELECT 1 FROM task_run x WHERE x.live_exclusive_target = ",
            $t,
            "target))"
        )
    };
}
pub(crate) use admitted_sql;

/// Whether a submit may admit any run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Those [`admitted_sql`] passes, when the plan allows it at all
    /// ([`crate::plan::NewPlan::admits_runs`]) and the submit gets the
    /// promotion lock; without the lock, none.
    IfClear,
    /// None: every run PENDING, for the round.
    Never,
}
