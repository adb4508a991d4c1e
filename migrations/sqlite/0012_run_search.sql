-- The runs search (GET /api/v1/runs, the Runs page): the indexes of the
-- PostgreSQL migration 0014_run_search, which says why each is where it
-- is. SQLite compares text byte by byte (BINARY), so a target prefix is a
-- range without a collation clause.
CREATE INDEX task_target ON task (target);
CREATE INDEX task_run_replica ON task_run (replica_id, id) WHERE finished_at IS NOT NULL;
CREATE INDEX run_event_actor ON run_event (actor, run_id)
    WHERE replica_id IS NULL AND actor <> 'scheduler';
