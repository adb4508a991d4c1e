-- The runs search (GET /api/v1/runs, the Runs page). A search first reads
-- the newest runs through the primary key; these serve the filters whose
-- matches are rare there. Neither gets an entry per run: the hot path
-- (submit, promote, claim, finish) does not pay for the search.

-- No index for the target or the replica filter. Each one tried (finished
-- runs by target, tasks by target, finished runs by replica) cost the hot
-- path 13-16 % of throughput in A/B runs (docs/benchmarks.md#runs-search):
-- the finishing update, or the submit, paid an entry per run. A target or
-- replica absent from recent history is found by reading back through
-- the primary key instead.

-- Actor: who submitted a plan (one entry per plan, not per run), and the
-- events people write on runs afterwards — retry, cancel, skip, approve,
-- start. Submits' own events, replicas' claims and finishes and the
-- scheduler's promotions, the bulk of the history, are left out.
CREATE INDEX plan_created_by ON plan (created_by, id);
CREATE INDEX run_event_actor ON run_event (actor, run_id)
    WHERE actor <> 'scheduler' AND actor IS DISTINCT FROM replica_id
        AND detail IS DISTINCT FROM 'submitted';
