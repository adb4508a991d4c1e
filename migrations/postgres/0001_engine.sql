-- Baton's engine tables: plans, tasks, runs, their event history and logs,
-- and the replicas that execute them. The SQLite schema in
-- migrations/sqlite/ has the same tables and columns.

CREATE TABLE plan (
    id             BIGSERIAL PRIMARY KEY,
    name           TEXT        NOT NULL,
    description    TEXT        NOT NULL DEFAULT '',
    -- Max runs of this plan AVAILABLE or RUNNING at once; NULL = no limit.
    parallel_limit BIGINT      CHECK (parallel_limit IS NULL OR parallel_limit >= 1),
    created_at     TIMESTAMPTZ NOT NULL,
    created_by     TEXT        NOT NULL
);

CREATE TABLE task (
    id                    BIGSERIAL PRIMARY KEY,
    plan_id               BIGINT      NOT NULL REFERENCES plan (id) ON DELETE CASCADE,
    name                  TEXT        NOT NULL,
    target                TEXT        NOT NULL,
    exclusive             BOOLEAN     NOT NULL,
    version               TEXT,
    run_at                TIMESTAMPTZ,
    node                  TEXT,
    timeout_ms            BIGINT      NOT NULL CHECK (timeout_ms > 0),
    max_attempts          BIGINT      NOT NULL CHECK (max_attempts >= 1),
    heartbeat_interval_ms BIGINT,
    heartbeat_timeout_ms  BIGINT,
    -- JSON: {"kind": "command" | "http" | "sleep" | <custom>, ...}
    executor              TEXT        NOT NULL,
    -- The task's status is its latest run's status.
    latest_run_id         BIGINT,
    skipped_at            TIMESTAMPTZ,
    skipped_by            TEXT,
    UNIQUE (plan_id, name)
);

CREATE TABLE task_run (
    id                 BIGSERIAL PRIMARY KEY,
    task_id            BIGINT      NOT NULL REFERENCES task (id) ON DELETE CASCADE,
    plan_id            BIGINT      NOT NULL,
    attempt            BIGINT      NOT NULL,
    status             TEXT        NOT NULL CHECK (status IN
                           ('PENDING', 'AVAILABLE', 'RUNNING', 'DONE', 'FAILED', 'CANCELED')),
    -- Copies of the task's gate fields, so the promoter and claimers read
    -- one table with no joins on the hot path. Tasks never change them.
    target             TEXT        NOT NULL,
    exclusive          BOOLEAN     NOT NULL,
    version            TEXT,
    node               TEXT,
    timeout_ms         BIGINT      NOT NULL,
    max_attempts       BIGINT      NOT NULL,
    run_at             TIMESTAMPTZ,
    replica_id         TEXT,
    created_at         TIMESTAMPTZ NOT NULL,
    started_at         TIMESTAMPTZ,
    finished_at        TIMESTAMPTZ,
    last_heartbeat_at  TIMESTAMPTZ,
    heartbeat_deadline TIMESTAMPTZ,
    deadline           TIMESTAMPTZ,
    -- Why a PENDING run is not promoted yet; NULL in every other status.
    waiting_cause      TEXT,
    result_code        BIGINT,
    error              TEXT,
    UNIQUE (task_id, attempt)
);

-- One small index per live status, oldest first: the promoter reads
-- PENDING, claimers take AVAILABLE in id order (an ordered index scan that
-- stops after the batch instead of sorting every AVAILABLE run), the
-- heartbeat and sweeper look at RUNNING. A run leaves each as it moves on.
CREATE INDEX task_run_pending ON task_run (id) WHERE status = 'PENDING';
CREATE INDEX task_run_available ON task_run (id) WHERE status = 'AVAILABLE';
CREATE INDEX task_run_running ON task_run (id) WHERE status = 'RUNNING';

-- Events and log lines are written on the hot path, always in the same
-- statement or transaction as the run they belong to; a foreign key would
-- add a lookup and a row lock on task_run per row and prove nothing more.
CREATE TABLE run_event (
    id          BIGSERIAL PRIMARY KEY,
    run_id      BIGINT      NOT NULL,
    -- NULL when the event created the run.
    from_status TEXT,
    to_status   TEXT        NOT NULL,
    replica_id  TEXT,
    actor       TEXT        NOT NULL,
    at          TIMESTAMPTZ NOT NULL,
    detail      TEXT
);
CREATE INDEX run_event_run ON run_event (run_id, id);

CREATE TABLE run_log (
    id     BIGSERIAL PRIMARY KEY,
    run_id BIGINT      NOT NULL,
    at     TIMESTAMPTZ NOT NULL,
    stream TEXT        NOT NULL CHECK (stream IN ('stdout', 'stderr')),
    line   TEXT        NOT NULL
);
CREATE INDEX run_log_run ON run_log (run_id, id);

CREATE TABLE replica (
    replica_id     TEXT PRIMARY KEY,
    hostname       TEXT        NOT NULL,
    -- JSON array of label strings.
    labels         TEXT        NOT NULL,
    version        TEXT        NOT NULL,
    started_at     TIMESTAMPTZ NOT NULL,
    last_heartbeat TIMESTAMPTZ NOT NULL
);
