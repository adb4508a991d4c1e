-- Liveness and notifications, SQLite flavour of migrations/postgres/0002.

ALTER TABLE task ADD COLUMN reassign_after_ms INTEGER;
ALTER TABLE task_run ADD COLUMN reassign_after_ms INTEGER;
ALTER TABLE plan ADD COLUMN webhooks TEXT NOT NULL DEFAULT '[]';

CREATE TABLE leader_lease (
    name        TEXT PRIMARY KEY,
    holder      TEXT    NOT NULL,
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
) STRICT;

CREATE TABLE notification_claim (
    plan_id    INTEGER PRIMARY KEY REFERENCES plan (id) ON DELETE CASCADE,
    event      TEXT    NOT NULL CHECK (event IN ('PIPELINE_FAILED', 'PIPELINE_COMPLETED')),
    claimed_at INTEGER NOT NULL
) STRICT;

CREATE TABLE delivery (
    id               INTEGER PRIMARY KEY,
    delivery_key     TEXT    NOT NULL UNIQUE,
    plan_id          INTEGER NOT NULL REFERENCES plan (id) ON DELETE CASCADE,
    event            TEXT    NOT NULL,
    url              TEXT    NOT NULL,
    secret           TEXT,
    payload          TEXT    NOT NULL,
    created_at       INTEGER NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('PENDING', 'DELIVERED', 'FAILED')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER NOT NULL,
    locked_by        TEXT,
    locked_until     INTEGER,
    delivered_at     INTEGER,
    last_status_code INTEGER,
    last_error       TEXT
) STRICT;
CREATE INDEX delivery_due ON delivery (next_attempt_at) WHERE state = 'PENDING';
CREATE INDEX delivery_plan ON delivery (plan_id, id);

CREATE TABLE delivery_attempt (
    id          INTEGER PRIMARY KEY,
    delivery_id INTEGER NOT NULL REFERENCES delivery (id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    replica_id  TEXT    NOT NULL,
    at          INTEGER NOT NULL,
    status_code INTEGER,
    error       TEXT
) STRICT;
CREATE INDEX delivery_attempt_delivery ON delivery_attempt (delivery_id, id);
