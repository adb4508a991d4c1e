-- Checks the hot path paid for on every row and that prove nothing the
-- statements writing those rows do not guarantee already.
--
-- run_event is append-only and read by run (run_event_run) or, in tests,
-- whole. Its primary-key index was one more B-tree entry for every status
-- change, four per run, for lookups nobody makes; ids still come from the
-- sequence, so they stay unique and ordered.
ALTER TABLE run_event DROP CONSTRAINT run_event_pkey;

-- A task is only ever inserted by the statement that inserts its plan, and
-- a run only from its task's row (PLAN_SUBMIT, runs_create), so the
-- reference is right by construction; nothing deletes plans or tasks, so
-- the cascades never fire. As foreign keys they cost a trigger, a lookup
-- and a row lock per row: a sixth of a submit's database time.
ALTER TABLE task DROP CONSTRAINT task_plan_id_fkey;
ALTER TABLE task_run DROP CONSTRAINT task_run_task_id_fkey;

-- SQLite keeps all three: its rowid is the event's key at no cost, and a
-- foreign-key check there is one probe of an index in the same process.
