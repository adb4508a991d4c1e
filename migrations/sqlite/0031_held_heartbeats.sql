-- Heartbeats recorded beside a row another client held (docs/design.md,
-- "Liveness"; migrations/postgres/0031_held_heartbeats.sql says why).
-- SQLite has no row locks, so only PostgreSQL writes these; the sweeper
-- reads them the same way on both.
CREATE TABLE held_run_heartbeat (
    run_id   INTEGER PRIMARY KEY,
    deadline INTEGER NOT NULL
) STRICT;
CREATE TABLE held_replica_heartbeat (
    replica_id TEXT PRIMARY KEY,
    at         INTEGER NOT NULL
) STRICT;
