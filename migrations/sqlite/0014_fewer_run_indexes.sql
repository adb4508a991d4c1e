-- Two indexes fewer on task_run, the table every run changes three times:
-- each was a subset of task_run_ended_badly (plan_id) WHERE status IN
-- ('FAILED', 'CANCELED'), which now serves their reads (the plan list's
-- CANCELED set, the promoter's halt read). Both name the status, so SQLite
-- tested both on every status change of every run.
-- migrations/postgres/0016_fewer_run_indexes.sql says more.
DROP INDEX task_run_canceled;
DROP INDEX task_run_halting;
