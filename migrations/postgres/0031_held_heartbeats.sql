-- Heartbeats recorded beside a row another client held (docs/design.md,
-- "Liveness"). While an outside transaction holds a RUNNING run's row or
-- a replica's row, the beat cannot write it: it waits in the row's lock
-- queue for a while and is sent again, and each time the wait runs out
-- it writes here instead. Between one wait and the next nobody queues for
-- the row, and a holder letting go right then used to hand it to a sweep
-- (which skips held rows and takes free ones) past its deadline: a live
-- run, or every run of a live replica, failed. The sweeper judges the
-- later of the row's stamp and the one here, and deletes records of runs
-- no longer RUNNING and of replicas without a row.
CREATE TABLE held_run_heartbeat (
    run_id   BIGINT PRIMARY KEY,
    deadline TIMESTAMPTZ NOT NULL
);
CREATE TABLE held_replica_heartbeat (
    replica_id TEXT PRIMARY KEY,
    at         TIMESTAMPTZ NOT NULL
);
