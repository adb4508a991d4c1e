-- How many of a plan's tasks are neither DONE nor SKIPPED; see
-- migrations/postgres/0006_plan_open_tasks.sql. A finish or skip that
-- completes tasks takes them off the count in its own transaction and
-- learns at once whether the plan is complete.
ALTER TABLE plan ADD COLUMN open_tasks INTEGER NOT NULL DEFAULT 0;

UPDATE plan SET open_tasks = (
    SELECT COUNT(*) FROM task t LEFT JOIN task_run r ON r.id = t.latest_run_id
    WHERE t.plan_id = plan.id AND t.skipped_at IS NULL AND (r.id IS NULL OR r.status <> 'DONE'));
