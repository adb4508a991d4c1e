-- The AVAILABLE runs, one row each, kept by every statement that moves a
-- run into or out of AVAILABLE (docs/design.md, "Run storage"). Claims
-- walk this narrow table instead of a partial index of task_run naming
-- the status: the first of the status indexes to leave task_run, so that
-- a run's ordinary transitions can one day rewrite its row in place
-- (HOT) instead of adding an index entry each.
CREATE TABLE available_run (
    run_id BIGINT PRIMARY KEY,
    node   TEXT
);
-- No index of the pinned ones: a claim locks every index of the tables it
-- reads, and PostgreSQL keeps 16 such locks per transaction out of its
-- shared lock table (server/src/store/postgres/plan_tests.rs). The
-- sweeper reads the whole queue for them every second instead.

INSERT INTO available_run (run_id, node) SELECT id, node FROM task_run WHERE status = 'AVAILABLE';

DROP INDEX task_run_available;
DROP INDEX task_run_available_pinned;

-- The run storage each replica's build keeps: 1 = the queue above. A
-- replica older than this migration keeps none, and its row says 0:
-- while such a row exists, and for a minute after the leader last saw
-- one (`queue_repair`), the leader repairs the queue from the runs'
-- statuses (server/src/store/engine/queue_repair.rs).
ALTER TABLE replica ADD COLUMN run_storage SMALLINT NOT NULL DEFAULT 0;
CREATE TABLE queue_repair (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    until TIMESTAMPTZ
);
INSERT INTO queue_repair (id) VALUES (1);
