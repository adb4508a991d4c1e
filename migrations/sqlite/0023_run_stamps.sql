-- The same columns as PostgreSQL's 0023, so that both backends read a
-- run's history with one statement. SQLite leaves them NULL: its run_event
-- rows cost it little (one process, the rowid as key), so every transition
-- stays an event row there (docs/design.md, "Status model").
ALTER TABLE task_run ADD COLUMN created_seq INTEGER;
ALTER TABLE task_run ADD COLUMN available_at INTEGER;
ALTER TABLE task_run ADD COLUMN available_seq INTEGER;
ALTER TABLE task_run ADD COLUMN claimed_seq INTEGER;
ALTER TABLE task_run ADD COLUMN ended_seq INTEGER;

-- The runs search by actor reads a cancel's asker here on both backends
-- (PostgreSQL's 0023 says why); only runs someone asked to cancel have an
-- entry.
CREATE INDEX task_run_cancel_asked ON task_run (cancel_requested_by, id)
    WHERE cancel_requested_by IS NOT NULL;
