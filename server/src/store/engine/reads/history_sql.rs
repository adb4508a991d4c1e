//! Runs' histories, read the same way whichever way each transition was
//! stored (docs/design.md, "Status model").
//!
//! A transition is either an event row in `run_event` or, on the ordinary
//! path, a stamp on the run's own row: its `*_seq` column holds the number
//! its event row would have had (the same sequence), and the rest of the
//! event follows from the row:
//!
//! | stamp | from → to | replica | actor | at | detail |
//! |---|---|---|---|---|---|
//! | `created_seq` | — → PENDING | — | the plan's submitter | `created_at` | "submitted" |
//! | `available_seq` | PENDING → AVAILABLE | — | "scheduler" | `available_at` | — |
//! | `claimed_seq` | AVAILABLE → RUNNING | `replica_id` | `replica_id` | `started_at` | — |
//! | `ended_seq` | RUNNING → `status` | `replica_id` | the replica, or who asked to cancel | `finished_at` | `error` |
//!
//! Those columns keep their values for as long as the stamp stands: a
//! write that would change one (a hand-back clears the claim's replica)
//! first turns the stamp into the event row it stands for. Only
//! PostgreSQL stamps; SQLite's columns stay NULL and its history is all
//! event rows.

/// How many transitions the runs a query selects have stamped on their
/// rows: the events of theirs that are not `run_event` rows.
macro_rules! stamps_counted_sql {
    () => {
        "COUNT(created_seq) + COUNT(available_seq) + COUNT(claimed_seq) + COUNT(ended_seq)"
    };
}
pub(crate) use stamps_counted_sql;

/// The event a run `r`'s end stamp stands for, as the columns of
/// `run_event` in order.
macro_rules! ended_event_sql {
    () => {
        "r.ended_seq, r.id, 'RUNNING', r.status, r.replica_id,
        CASE WHEN r.status = 'CANCELED' THEN r.cancel_requested_by ELSE r.replica_id END,
        r.finished_at, r.error"
    };
}

/// The history as rows of `rows::EventRow`, ordered by id: the event rows
/// where `$events` holds (of `run_event e`) and each kind of stamp where
/// its condition holds (of `task_run r`). Each condition is the caller's,
/// per branch, so that every branch reads through an index of its own.
/// The actor "scheduler" is [`crate::store::SCHEDULER`].
macro_rules! history_sql {
    (
        events: $events:literal,
        created: $created:literal,
        available: $available:literal,
        claimed: $claimed:literal,
        ended: $ended:literal,
        tail: $tail:literal
    ) => {
        concat!(
            "SELECT e.id, e.run_id, e.from_status, e.to_status, e.replica_id, e.actor, e.at,
                e.detail
            FROM run_event e WHERE ",
            $events,
            "
            UNION ALL
            SELECT r.created_seq, r.id, NULL, 'PENDING', NULL, p.created_by, r.created_at,
                'submitted'
            FROM task_run r JOIN plan p ON p.id = r.plan_id
            WHERE r.created_seq IS NOT NULL AND ",
            $created,
            "
            UNION ALL
            SELECT r.available_seq, r.id, 'PENDING', 'AVAILABLE', NULL, 'scheduler',
                r.available_at, NULL
            FROM task_run r WHERE r.available_seq IS NOT NULL AND ",
            $available,
            "
            UNION ALL
            SELECT r.claimed_seq, r.id, 'AVAILABLE', 'RUNNING', r.replica_id, r.replica_id,
                r.started_at, NULL
            FROM task_run r WHERE r.claimed_seq IS NOT NULL AND ",
            $claimed,
            "
            UNION ALL
            SELECT ",
            ended_event_sql!(),
            "
            FROM task_run r WHERE r.ended_seq IS NOT NULL AND ",
            $ended,
            "
            ORDER BY id",
            $tail
        )
    };
}

/// Run page and `GET /api/v1/runs/{id}`: one run's history, oldest first.
pub const RUN_EVENTS: &str = history_sql!(
    events: "e.run_id = $1",
    created: "r.id = $1",
    available: "r.id = $1",
    claimed: "r.id = $1",
    ended: "r.id = $1",
    tail: ""
);

/// History checks and timelines: the transitions numbered after a cursor,
/// in order. A stamp has no index of its own: this read is for checks,
/// which read the whole history once, not for a page.
pub const EVENTS_AFTER: &str = history_sql!(
    events: "e.id > $1",
    created: "r.created_seq > $1",
    available: "r.available_seq > $1",
    claimed: "r.claimed_seq > $1",
    ended: "r.ended_seq > $1",
    tail: " LIMIT $2"
);

/// Turns the stamp of a run's end into the event row it stands for, under
/// the same number, before a write changes what the stamp reads from
/// (`engine::execution::endings` appends to a failed run's error). A run
/// with no such stamp is left alone.
pub const END_STAMP_TO_EVENT: &str = concat!(
    "INSERT INTO run_event (id, run_id, from_status, to_status, replica_id, actor, at, detail)
    SELECT ",
    ended_event_sql!(),
    " FROM task_run r WHERE r.id = $1 AND r.ended_seq IS NOT NULL"
);

/// The second half of [`END_STAMP_TO_EVENT`], in the same transaction.
pub const END_STAMP_CLEAR: &str = "UPDATE task_run SET ended_seq = NULL WHERE id = $1";

#[cfg(test)]
mod tests {
    /// The stamps' actor for promotions is the scheduler's name.
    #[test]
    fn the_promotion_stamp_names_the_scheduler() {
        assert_eq!(crate::store::SCHEDULER, "scheduler");
        assert!(super::RUN_EVENTS.contains("'PENDING', 'AVAILABLE', NULL, 'scheduler'"));
    }
}
