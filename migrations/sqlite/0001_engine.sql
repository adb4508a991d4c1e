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

CREATE INDEX task_run_live ON task_run (status, id)
    WHERE status IN ('PENDING', 'AVAILABLE', 'RUNNING');
CREATE INDEX task_run_plan ON task_run (plan_id);

CREATE TABLE run_event (
    id          INTEGER PRIMARY KEY,
    run_id      INTEGER NOT NULL REFERENCES task_run (id) ON DELETE CASCADE,
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
    run_id INTEGER NOT NULL REFERENCES task_run (id) ON DELETE CASCADE,
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
