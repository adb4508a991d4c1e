-- Plans accepted before field bounds existed may hold durations no claim can
-- add to now() (a million-year timeout overflowed `interval` on every claim,
-- on every replica). Clamp them to the bounds validation now enforces, so an
-- upgrade heals a database a poison plan had stopped.
UPDATE task SET timeout_ms = LEAST(GREATEST(timeout_ms, 100), 2592000000)
    WHERE timeout_ms NOT BETWEEN 100 AND 2592000000;
UPDATE task SET heartbeat_interval_ms = LEAST(GREATEST(heartbeat_interval_ms, 1000), 3600000)
    WHERE heartbeat_interval_ms NOT BETWEEN 1000 AND 3600000;
UPDATE task SET heartbeat_timeout_ms = LEAST(GREATEST(heartbeat_timeout_ms, 2000), 86400000)
    WHERE heartbeat_timeout_ms NOT BETWEEN 2000 AND 86400000;
UPDATE task SET reassign_after_ms = LEAST(GREATEST(reassign_after_ms, 1000), 31536000000)
    WHERE reassign_after_ms NOT BETWEEN 1000 AND 31536000000;
UPDATE task SET run_at = LEAST(GREATEST(run_at, '1970-01-01T00:00:00Z'), '9999-12-31T23:59:59Z')
    WHERE run_at NOT BETWEEN '1970-01-01T00:00:00Z' AND '9999-12-31T23:59:59Z';
UPDATE task_run SET timeout_ms = LEAST(GREATEST(timeout_ms, 100), 2592000000)
    WHERE timeout_ms NOT BETWEEN 100 AND 2592000000;
UPDATE task_run SET reassign_after_ms = LEAST(GREATEST(reassign_after_ms, 1000), 31536000000)
    WHERE reassign_after_ms NOT BETWEEN 1000 AND 31536000000;
UPDATE task_run SET run_at = LEAST(GREATEST(run_at, '1970-01-01T00:00:00Z'), '9999-12-31T23:59:59Z')
    WHERE run_at NOT BETWEEN '1970-01-01T00:00:00Z' AND '9999-12-31T23:59:59Z';
