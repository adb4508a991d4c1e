-- The dashboard reads recent history and filters plans by status without
-- scanning task_run. Runs finished per minute and status over the last
-- hour come from task_run_finished alone; the latest failures, and plans
-- with a failed or canceled task, from the two small indexes below (only
-- runs that end badly pay for them).
CREATE INDEX task_run_finished ON task_run (finished_at, status) WHERE finished_at IS NOT NULL;
CREATE INDEX task_run_failed ON task_run (finished_at, plan_id) WHERE status = 'FAILED';
CREATE INDEX task_run_canceled ON task_run (plan_id) WHERE status = 'CANCELED';
