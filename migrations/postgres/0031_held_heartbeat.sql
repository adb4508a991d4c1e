-- Run heartbeats recorded beside a run whose row another client held
-- (docs/design.md, "Liveness"). While an outside transaction holds a
-- RUNNING run's row, its replica cannot extend the row's
-- heartbeat_deadline; its beat waits in the row's lock queue for a while,
-- is sent again, and each time the wait runs out it writes here instead.
-- The sweeper judges the later of the two deadlines, so a row let go
-- between two waits, past its own deadline, is not failed before the
-- replica's next beat reaches it. Rows of runs no longer RUNNING are
-- deleted by the sweeper.
CREATE TABLE held_heartbeat (
    run_id   BIGINT PRIMARY KEY,
    deadline TIMESTAMPTZ NOT NULL
);
