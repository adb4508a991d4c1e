-- The dashboard's overview reads recent history without scanning task_run:
-- runs finished per minute and status over the last hour come from this
-- index alone, and the latest failures from the second (only failed runs
-- pay for it).
CREATE INDEX task_run_finished ON task_run (finished_at, status) WHERE finished_at IS NOT NULL;
CREATE INDEX task_run_failed ON task_run (finished_at) WHERE status = 'FAILED';
