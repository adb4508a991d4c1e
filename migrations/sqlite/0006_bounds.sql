-- Plans accepted before field bounds existed may hold durations no claim can
-- add to now() (a million-year timeout overflowed `interval` on every claim,
-- on every replica). Clamp them to the bounds validation now enforces, so an
-- upgrade heals a database a poison plan had stopped.
-- SQLite keeps times as Unix microseconds (253402300799000000 is the end of 9999).
UPDATE task SET timeout_ms = MIN(MAX(timeout_ms, 100), 2592000000)
    WHERE timeout_ms NOT BETWEEN 100 AND 2592000000;
UPDATE task SET heartbeat_interval_ms = MIN(MAX(heartbeat_interval_ms, 1000), 3600000)
    WHERE heartbeat_interval_ms NOT BETWEEN 1000 AND 3600000;
UPDATE task SET heartbeat_timeout_ms = MIN(MAX(heartbeat_timeout_ms, 2000), 86400000)
    WHERE heartbeat_timeout_ms NOT BETWEEN 2000 AND 86400000;
UPDATE task SET reassign_after_ms = MIN(MAX(reassign_after_ms, 1000), 31536000000)
    WHERE reassign_after_ms NOT BETWEEN 1000 AND 31536000000;
UPDATE task SET run_at = MIN(MAX(run_at, 0), 253402300799000000)
    WHERE run_at NOT BETWEEN 0 AND 253402300799000000;
UPDATE task_run SET timeout_ms = MIN(MAX(timeout_ms, 100), 2592000000)
    WHERE timeout_ms NOT BETWEEN 100 AND 2592000000;
UPDATE task_run SET reassign_after_ms = MIN(MAX(reassign_after_ms, 1000), 31536000000)
    WHERE reassign_after_ms NOT BETWEEN 1000 AND 31536000000;
UPDATE task_run SET run_at = MIN(MAX(run_at, 0), 253402300799000000)
    WHERE run_at NOT BETWEEN 0 AND 253402300799000000;
