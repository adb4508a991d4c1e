-- The last two indexes of task_run that stood in the way of HOT claims
-- and finishes (docs/design.md, "Run storage") give way to two logs, one
-- row per statement rather than an index entry per run.
--
-- task_run_running (the RUNNING runs) and task_run_finished (runs by end
-- time) each named the status, which every claim and finish changes, so
-- neither could rewrite its row in place. Now:
--   claim_log   one row per claim statement, listing the runs it took.
--               The RUNNING runs are the runs the log lists that are
--               RUNNING (the view running_run): a row whose runs have all
--               moved on is stale, costs lookups and changes no answer,
--               and the sweeper deletes it.
--   finish_log  one row per statement that ends runs and final status,
--               with the end time and the runs: the overview's counts per
--               minute. (The runs search's since/until filters walk the
--               primary key, as they did when the planner judged that
--               cheaper than task_run_finished.)
-- Each is written by the statement that claims or ends the runs, in its
-- transaction.
--
-- Replicas of the builds before this one do not write the logs. Until the
-- last of them has gone, a trigger writes them for any statement that
-- does not say it wrote them itself (this build's connections set
-- baton.run_logs = 'written'); the newer replicas then drop it (it costs
-- every update of task_run, docs/deploy.md, "Rolling upgrade"). It is
-- made only if a replica of an older build has a row: none can start
-- after this migration (a build refuses a database with migrations it
-- does not know), and one that still runs has its heartbeat row.
CREATE TABLE claim_log (
    id BIGSERIAL PRIMARY KEY,
    runs BIGINT[] NOT NULL
);

CREATE TABLE finish_log (
    id BIGSERIAL PRIMARY KEY,
    finished_at TIMESTAMPTZ NOT NULL,
    status TEXT NOT NULL,
    runs BIGINT[] NOT NULL
);
CREATE INDEX finish_log_at ON finish_log (finished_at);

-- What is RUNNING now, read through the claims. The ids are gathered
-- first and looked up by primary key (duplicates, from a run claimed,
-- handed back and claimed again, are looked up once).
CREATE VIEW running_run AS
    SELECT r.* FROM task_run r
    WHERE r.id = ANY(ARRAY(SELECT unnest(c.runs) FROM claim_log c)) AND r.status = 'RUNNING';

INSERT INTO claim_log (runs)
    SELECT array_agg(id ORDER BY id) FROM task_run WHERE status = 'RUNNING' HAVING COUNT(*) > 0;
INSERT INTO finish_log (finished_at, status, runs)
    SELECT finished_at, status, array_agg(id ORDER BY id) FROM task_run
    WHERE finished_at IS NOT NULL GROUP BY finished_at, status;

CREATE FUNCTION baton_log_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('baton.run_logs', true) = 'written' THEN
        RETURN NULL;
    END IF;
    INSERT INTO claim_log (runs)
        SELECT array_agg(n.id ORDER BY n.id) FROM new_runs n JOIN old_runs o ON o.id = n.id
        WHERE n.status = 'RUNNING' AND o.status IS DISTINCT FROM 'RUNNING'
        HAVING COUNT(*) > 0;
    INSERT INTO finish_log (finished_at, status, runs)
        SELECT n.finished_at, n.status, array_agg(n.id ORDER BY n.id)
        FROM new_runs n JOIN old_runs o ON o.id = n.id
        WHERE n.finished_at IS NOT NULL AND o.finished_at IS NULL
        GROUP BY n.finished_at, n.status;
    RETURN NULL;
END $$;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM replica WHERE run_storage < 2) THEN
        CREATE TRIGGER task_run_logged AFTER UPDATE ON task_run
            REFERENCING OLD TABLE AS old_runs NEW TABLE AS new_runs
            FOR EACH STATEMENT EXECUTE FUNCTION baton_log_runs();
    END IF;
END $$;

DROP INDEX task_run_running;
DROP INDEX task_run_finished;
