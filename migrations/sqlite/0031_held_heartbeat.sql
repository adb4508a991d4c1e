-- Run heartbeats recorded beside a run whose row another client held
-- (docs/design.md, "Liveness"). SQLite has no row locks, so only
-- PostgreSQL writes here; the sweeper reads it the same way on both.
CREATE TABLE held_heartbeat (
    run_id   INTEGER PRIMARY KEY,
    deadline INTEGER NOT NULL
) STRICT;
