-- The ordinary path of a run is stamped on its own row instead of written
-- as event rows (docs/design.md, "Status model"): created by a submit,
-- promoted (PENDING -> AVAILABLE), claimed (AVAILABLE -> RUNNING) and
-- ended by the replica that executed it. Each stamp takes its number from
-- run_event's own sequence, the number its event row would have had, so a
-- run's history and the whole history keep one order whichever way each
-- transition is stored. Every other transition (handed back, swept,
-- canceled, approved, unpinned, a retry's creation) stays an event row.
--
-- Runs stored before this migration have no stamps: their history is all
-- in run_event and reads as it did. A replica of the previous build keeps
-- writing event rows beside these stamps during a rolling upgrade.
ALTER TABLE task_run
    ADD COLUMN created_seq   BIGINT,
    ADD COLUMN available_at  TIMESTAMPTZ,
    ADD COLUMN available_seq BIGINT,
    ADD COLUMN claimed_seq   BIGINT,
    ADD COLUMN ended_seq     BIGINT;

-- The runs search by actor: a RUNNING run canceled at someone's request
-- ends in their name, stamped on the row rather than in run_event_actor.
-- Only runs someone asked to cancel have an entry.
CREATE INDEX task_run_cancel_asked ON task_run (cancel_requested_by, id)
    WHERE cancel_requested_by IS NOT NULL;
