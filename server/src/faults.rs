//! Failure injection for the crash tests (docs/design.md, "Invariants",
//! invariant 8). Enabled only by `BATON_FAULT`, which production
//! deployments never set.

/// `BATON_FAULT=exit-after-notification-claim`: the process kills itself
/// with SIGKILL right after committing a transaction that claimed a plan's
/// notification, before any delivery is attempted — the crash the outbox
/// exists to survive.
pub fn exit_after_notification_claim() -> bool {
    std::env::var("BATON_FAULT").is_ok_and(|f| f == "exit-after-notification-claim")
}

/// `BATON_FAULT=panic-in-promoter`: the promoter panics in its first round
/// as leader, to prove a panicking loop stops the replica (exit non-zero)
/// rather than leaving a healthy-looking leader that schedules nothing.
pub fn panic_in_promoter() -> bool {
    std::env::var("BATON_FAULT").is_ok_and(|f| f == "panic-in-promoter")
}

/// `BATON_FAULT=exit-before-tick-commit`: the process kills itself after
/// writing a schedule tick's plan, before its transaction commits.
pub fn exit_before_tick_commit() -> bool {
    std::env::var("BATON_FAULT").is_ok_and(|f| f == "exit-before-tick-commit")
}

/// `BATON_FAULT=exit-after-tick-commit`: the process kills itself right
/// after committing a round that made a schedule tick's plan.
pub fn exit_after_tick_commit() -> bool {
    std::env::var("BATON_FAULT").is_ok_and(|f| f == "exit-after-tick-commit")
}

/// `BATON_FAULT=finishes-unrecorded-for=SECS`: every batch of finishes
/// fails to be stored for its first SECS seconds (as through connections
/// killed again and again), while every other write succeeds — a finish
/// retried for longer than its run's heartbeat timeout.
pub fn finishes_unrecorded_for() -> Option<std::time::Duration> {
    let fault = std::env::var("BATON_FAULT").ok()?;
    let secs = fault.strip_prefix("finishes-unrecorded-for=")?;
    Some(std::time::Duration::from_secs(secs.parse().ok()?))
}

/// Dies the way a machine loses power: no destructors, no clean-up.
pub fn die_now(why: &str) -> ! {
    tracing::error!("BATON_FAULT: {why}; killing this process");
    // SAFETY: signalling our own process.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    unreachable!("SIGKILL does not return")
}
