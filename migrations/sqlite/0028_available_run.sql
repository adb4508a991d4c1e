-- The AVAILABLE runs, one row each, kept by every statement that moves a
-- run into or out of AVAILABLE (docs/design.md, "Run storage"). Claims
-- walk this narrow table instead of a partial index of task_run naming
-- the status. migrations/postgres/0028_available_run.sql says more.
CREATE TABLE available_run (
    run_id INTEGER PRIMARY KEY,
    node   TEXT
) STRICT;
-- No index of the pinned ones, as on PostgreSQL: the sweeper reads the
-- whole queue for them every second.

INSERT INTO available_run (run_id, node) SELECT id, node FROM task_run WHERE status = 'AVAILABLE';

DROP INDEX task_run_available;
DROP INDEX task_run_available_pinned;

-- The run storage each replica's build keeps, and until when the leader
-- repairs the queue after it last saw a replica that keeps none, as on
-- PostgreSQL (one SQLite database has one replica, but the statements
-- are shared).
ALTER TABLE replica ADD COLUMN run_storage INTEGER NOT NULL DEFAULT 0;
CREATE TABLE queue_repair (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    until INTEGER
) STRICT;
INSERT INTO queue_repair (id) VALUES (1);
