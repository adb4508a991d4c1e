-- The runs search (GET /api/v1/runs, the Runs page). A search first reads
-- the newest runs through the primary key; these serve the filters whose
-- matches are rare there, each written where it costs the hot path least.

-- Target prefix. On the task, which is written once at submit, not on the
-- run, whose every status change would add an entry. "C" collation so a
-- prefix is a range of bytes, whatever the database's collation.
CREATE INDEX task_target ON task (target COLLATE "C");

-- Replica. Only finished runs: the entry is made by the update that
-- finishes the run, never by the claim; a RUNNING run is found through
-- task_run_running instead.
CREATE INDEX task_run_replica ON task_run (replica_id, id) WHERE finished_at IS NOT NULL;

-- Actor: the events people and schedules write (submit, retry, cancel,
-- approve). Replicas' claims and finishes and the scheduler's promotions,
-- the bulk of the history, are left out.
CREATE INDEX run_event_actor ON run_event (actor, run_id)
    WHERE replica_id IS NULL AND actor <> 'scheduler';
