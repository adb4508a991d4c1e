-- How many of a plan's tasks are neither DONE nor SKIPPED. A finish or
-- skip that completes tasks takes them off the count in its own
-- transaction (UPDATE … RETURNING, under the plan's row lock) and learns
-- at once whether the plan is complete, for PIPELINE_COMPLETED.
--
-- It replaces a scan of the plan's tasks after every finish: the scan
-- stopped at the first open task, but the checks near a plan's end read
-- nearly every task, about a tenth of all the buffers the PostgreSQL
-- bench touched. The count only falls: no task leaves DONE or SKIPPED
-- (retry applies to FAILED and CANCELED tasks, skip to NOT_STARTED, FAILED
-- and CANCELED ones).
ALTER TABLE plan ADD COLUMN open_tasks BIGINT NOT NULL DEFAULT 0;

UPDATE plan p SET open_tasks = (
    SELECT COUNT(*) FROM task t LEFT JOIN task_run r ON r.id = t.latest_run_id
    WHERE t.plan_id = p.id AND t.skipped_at IS NULL AND (r.id IS NULL OR r.status <> 'DONE'));
