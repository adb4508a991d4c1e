-- The gates' and failures' indexes of task_run, keyed on columns derived
-- from the status, as on PostgreSQL (migrations/postgres/0029_gate_columns.sql
-- says why there). SQLite rewrites no row in place either way; the
-- columns are here so that both backends' reads are one SQL text.
-- VIRTUAL: computed when read, stored only in the indexes.
ALTER TABLE task_run ADD COLUMN pending_held INTEGER
    GENERATED ALWAYS AS (CASE WHEN status = 'PENDING' THEN CASE WHEN held THEN 1 ELSE 0 END END) VIRTUAL;
ALTER TABLE task_run ADD COLUMN ended_badly_plan INTEGER
    GENERATED ALWAYS AS (CASE WHEN status IN ('FAILED', 'CANCELED') THEN plan_id END) VIRTUAL;
ALTER TABLE task_run ADD COLUMN failed_at INTEGER
    GENERATED ALWAYS AS (CASE WHEN status = 'FAILED' THEN finished_at END) VIRTUAL;
ALTER TABLE task_run ADD COLUMN live_exclusive_target TEXT
    GENERATED ALWAYS AS (CASE WHEN exclusive AND status IN ('PENDING', 'AVAILABLE', 'RUNNING')
        THEN target END) VIRTUAL;

DROP INDEX task_run_pending;
DROP INDEX task_run_held_versions;
DROP INDEX task_run_ended_badly;
DROP INDEX task_run_failed;
DROP INDEX task_run_live_exclusive;

CREATE INDEX task_run_pending ON task_run (pending_held, id) WHERE pending_held IS NOT NULL;
CREATE INDEX task_run_held_versions ON task_run (id) WHERE pending_held = 1 AND version IS NOT NULL;
CREATE INDEX task_run_ended_badly ON task_run (ended_badly_plan) WHERE ended_badly_plan IS NOT NULL;
CREATE INDEX task_run_failed ON task_run (failed_at, plan_id) WHERE failed_at IS NOT NULL;
CREATE INDEX task_run_live_exclusive ON task_run (live_exclusive_target)
    WHERE live_exclusive_target IS NOT NULL;
