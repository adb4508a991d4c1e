-- Retention keeps a plan while its idempotency key stands, looking the
-- key up by plan; the cascade from a pruned plan finds it the same way.
CREATE INDEX plan_submission_plan ON plan_submission (plan_id);
