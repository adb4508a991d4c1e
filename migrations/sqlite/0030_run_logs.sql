-- On PostgreSQL this migration replaces the indexes of RUNNING runs and of
-- runs by end time with logs of claims and finishes, so that claims and
-- finishes can rewrite their rows in place (migrations/postgres/0030_run_logs.sql).
-- SQLite rewrites no row in place either way and keeps both indexes; the
-- view gives the reads of RUNNING runs one SQL text on both backends.
CREATE VIEW running_run AS SELECT * FROM task_run WHERE status = 'RUNNING';
