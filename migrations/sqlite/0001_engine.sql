-- Baton's engine tables, SQLite flavour of migrations/postgres/0001.
-- Timestamps are INTEGER Unix microseconds (UTC); booleans are 0/1.

CREATE TABLE plan (
    id             INTEGER PRIMARY KEY,
    name           TEXT    NOT NULL,
    description    TEXT    NOT NULL DEFAULT '',
    parallel_limit INTEGER CHECK (parallel_limit IS NULL OR parallel_limit >= 1),
    created_at     INTEGER NOT NULL,
    created_by     TEXT    NOT NULL
) STRICT;

CREATE TABLE task (
    id                    INTEGER PRIMARY KEY,
    plan_id               INTEGER NOT NULL REFERENCES plan (id) ON DELETE CASCADE,
    name                  TEXT    NOT NULL,
    target                TEXT    NOT NULL,
    exclusive             INTEGER NOT NULL,
    version               TEXT,
    run_at                INTEGER,
    node                  TEXT,
    timeout_ms            INTEGER NOT NULL CHECK (timeout_ms > 0),
    max_attempts          INTEGER NOT NULL CHECK (max_attempts >= 1),
    heartbeat_interval_ms INTEGER,
    heartbeat_timeout_ms  INTEGER,
    executor              TEXT    NOT NULL,
    latest_run_id         INTEGER,
    skipped_at            INTEGER,
    skipped_by            TEXT,
    UNIQUE (plan_id, name)
) STRICT;

CREATE TABLE task_run (
    id                 INTEGER PRIMARY KEY,
    task_id            INTEGER NOT NULL REFERENCES task (id) ON DELETE CASCADE,
    plan_id            INTEGER NOT NULL,
    attempt            INTEGER NOT NULL,
    status             TEXT    NOT NULL CHECK (status IN
                           ('PENDING', 'AVAILABLE', 'RUNNING', 'DONE', 'FAILED', 'CANCELED')),
    target             TEXT    NOT NULL,
    exclusive          INTEGER NOT NULL,
    version            TEXT,
    node               TEXT,
    timeout_ms         INTEGER NOT NULL,
    max_attempts       INTEGER NOT NULL,
    run_at             INTEGER,
    replica_id         TEXT,
    created_at         INTEGER NOT NULL,
    started_at         INTEGER,
    finished_at        INTEGER,
    last_heartbeat_at  INTEGER,
    heartbeat_deadline INTEGER,
    deadline           INTEGER,
    waiting_cause      TEXT,
    result_code        INTEGER,
    error              TEXT,
    UNIQUE (task_id, attempt)
) STRICT;

-- One small index per live status, oldest first: the promoter reads
-- PENDING, claimers take AVAILABLE in id order (an ordered index scan that
-- stops after the batch instead of sorting every AVAILABLE run), the
-- heartbeat and sweeper look at RUNNING. A run leaves each as it moves on.
CREATE INDEX task_run_pending ON task_run (id) WHERE status = 'PENDING';
CREATE INDEX task_run_available ON task_run (id) WHERE status = 'AVAILABLE';
CREATE INDEX task_run_running ON task_run (id) WHERE status = 'RUNNING';

-- No foreign keys from events and logs: see the PostgreSQL schema.
CREATE TABLE run_event (
    id          INTEGER PRIMARY KEY,
    run_id      INTEGER NOT NULL,
    from_status TEXT,
    to_status   TEXT    NOT NULL,
    replica_id  TEXT,
    actor       TEXT    NOT NULL,
    at          INTEGER NOT NULL,
    detail      TEXT
) STRICT;
CREATE INDEX run_event_run ON run_event (run_id, id);

CREATE TABLE run_log (
    id     INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL,
    at     INTEGER NOT NULL,
    stream TEXT    NOT NULL CHECK (stream IN ('stdout', 'stderr')),
    line   TEXT    NOT NULL
) STRICT;
CREATE INDEX run_log_run ON run_log (run_id, id);

CREATE TABLE replica (
    replica_id     TEXT PRIMARY KEY,
    hostname       TEXT    NOT NULL,
    labels         TEXT    NOT NULL,
    version        TEXT    NOT NULL,
    started_at     INTEGER NOT NULL,
    last_heartbeat INTEGER NOT NULL
) STRICT;
