//! What a new run copies from its task, written once for every statement
//! that makes runs (a submit that starts at once and a plan started or
//! retried later, on both backends): a field added to tasks that runs
//! must carry is added here, and every such statement carries it.

/// The task's columns a run copies, as `task_run` names them too;
/// `$t` is the task table's alias with its dot (`"t."`), or `""`.
///
/// `run_at` is not among them: a retry may be given its own.
macro_rules! run_copies_of_task {
    ($t:literal) => {
        concat!(
            $t,
            "target, ",
            $t,
            "exclusive, ",
            $t,
            "version, ",
            $t,
            "node, ",
            $t,
            "timeout_ms, ",
            $t,
            "max_attempts, ",
            $t,
            "reassign_after_ms"
        )
    };
}
pub(crate) use run_copies_of_task;
