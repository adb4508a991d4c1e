-- Whether the plan file asked to start at once (`start`, true unless it
-- said false), so that an export submits the plan again the way it was
-- first submitted: one held for an operator's Run stays held.
ALTER TABLE plan ADD COLUMN starts_on_submit BOOLEAN NOT NULL DEFAULT TRUE;

-- Plans stored before: one submitted with `start: false` either has no
-- run yet (none of its tasks points at one, and it is not a scheduled
-- plan queued for its turn) or was started since by an operator, which
-- the audit log recorded. An early start of a queued scheduled plan is
-- recorded the same way whatever its template said, so scheduled plans
-- with runs are left as starting.
UPDATE plan SET starts_on_submit = FALSE
WHERE (NOT queued AND NOT EXISTS (SELECT 1 FROM task t
        WHERE t.plan_id = plan.id AND t.latest_run_id IS NOT NULL))
   OR (schedule_id IS NULL AND id IN (SELECT plan_id FROM audit
        WHERE action = 'plan.start' AND outcome = 'done' AND plan_id IS NOT NULL));
