-- A cancel of a RUNNING run is a request: the run keeps its status (and so
-- its target, plan slot and version) until the replica executing it confirms
-- the kill, or the sweeper finds that replica stale (docs/design.md,
-- "Operator actions"). Who asked, and when (microseconds), until then.
ALTER TABLE task_run ADD COLUMN cancel_requested_by TEXT;
ALTER TABLE task_run ADD COLUMN cancel_requested_at INTEGER;
