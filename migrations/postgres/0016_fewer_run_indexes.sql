-- Two indexes fewer on task_run, the table every run changes three times.
--
-- None of a run's status changes is a HOT update (the live-status indexes
-- name the status), so for each new row version PostgreSQL opens, locks
-- and checks every index of the table, partial or not. Both indexes below
-- were subsets of task_run_ended_badly (plan_id) WHERE status IN
-- ('FAILED', 'CANCELED'), which now serves their reads:
-- - task_run_canceled: the plan list's "has a CANCELED task" set;
-- - task_run_halting: the promoter's halt read, which scanned all of it
--   every round anyway (its key, the target, was never searched) and now
--   also reads the unversioned failures, one index entry and row each.
-- With nine indexes, a claim's relation locks fit the 16 a backend keeps
-- in its fast-path slots (plan_tests checks it); with eleven they did not.
--
-- Only drops indexes: replicas of the release before keep working beside
-- it during a rolling upgrade (docs/deploy.md), their reads planned on
-- the index that remains.
DROP INDEX task_run_canceled;
DROP INDEX task_run_halting;
