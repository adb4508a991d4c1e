-- The gates' and failures' indexes of task_run, keyed on columns that
-- the database derives from the status (docs/design.md, "Run storage").
--
-- A PostgreSQL update can rewrite a row in place, with no new index
-- entry (a HOT update), only when no column that any index of the table
-- names (as a key or in its WHERE) changes. Five indexes named the
-- status in their WHERE, so every claim and finish changed an indexed
-- column, even though none of those runs had an entry in any of them.
-- Each generated column below is NULL except in the rare state its index
-- serves (PENDING, ended badly, FAILED, a live exclusive run), so a run
-- that goes AVAILABLE, RUNNING, DONE leaves all four unchanged, and the
-- indexes on them no longer stand in the way of a HOT claim or finish.
-- `pending_held` is 1 (held) or 0, not a boolean: the planner proves a
-- partial index's `IS NOT NULL` from `pending_held = 0`, but not from
-- `NOT pending_held`, which is what it makes of `= FALSE`.
--
-- The database computes them on every write, so replicas of the build
-- before this migration keep them right during a rolling upgrade without
-- knowing they exist (their reads by status plan without these indexes:
-- docs/deploy.md). Adding them rewrites task_run once, holding it for
-- about 4 s per million runs on a 2-core VM.
ALTER TABLE task_run
    ADD COLUMN pending_held SMALLINT
        GENERATED ALWAYS AS (CASE WHEN status = 'PENDING' THEN CASE WHEN held THEN 1 ELSE 0 END END) STORED,
    ADD COLUMN ended_badly_plan BIGINT
        GENERATED ALWAYS AS (CASE WHEN status IN ('FAILED', 'CANCELED') THEN plan_id END) STORED,
    ADD COLUMN failed_at TIMESTAMPTZ
        GENERATED ALWAYS AS (CASE WHEN status = 'FAILED' THEN finished_at END) STORED,
    ADD COLUMN live_exclusive_target TEXT
        GENERATED ALWAYS AS (CASE WHEN exclusive AND status IN ('PENDING', 'AVAILABLE', 'RUNNING')
            THEN target END) STORED;

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
