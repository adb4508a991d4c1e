-- The runs search (GET /api/v1/runs, the Runs page): the indexes of the
-- PostgreSQL migration 0014_run_search, which says why each is where it
-- is, and why the target and replica filters have none.
CREATE INDEX plan_created_by ON plan (created_by, id);
CREATE INDEX run_event_actor ON run_event (actor, run_id)
    WHERE actor <> 'scheduler' AND actor IS NOT replica_id AND detail IS NOT 'submitted';
