-- A submit admits a plain run straight to AVAILABLE only when no live
-- exclusive run holds or waits for its target (docs/design.md,
-- "Admission"); this is the probe it makes per task. Only exclusive runs
-- that are PENDING, AVAILABLE or RUNNING have an entry, so shared runs
-- never write to it.
CREATE INDEX task_run_live_exclusive ON task_run (target)
    WHERE exclusive AND status IN ('PENDING', 'AVAILABLE', 'RUNNING');
