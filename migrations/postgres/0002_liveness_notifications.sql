-- Liveness (SPEC §5) and notifications (SPEC §7). The SQLite schema in
-- migrations/sqlite/ has the same tables and columns.

-- How long a pinned run waits for a live replica carrying its node label
-- before any replica may run it; NULL = never. Copied onto each run like
-- the other gate fields.
ALTER TABLE task ADD COLUMN reassign_after_ms BIGINT;
ALTER TABLE task_run ADD COLUMN reassign_after_ms BIGINT;

-- The plan file's own webhooks: JSON [{"url": ..., "secret": ...}].
ALTER TABLE plan ADD COLUMN webhooks TEXT NOT NULL DEFAULT '[]';

-- Who runs the singleton loops (promoter, sweeper, pruning). A holder
-- renews before expires_at; anyone may take an expired lease.
CREATE TABLE leader_lease (
    name        TEXT PRIMARY KEY,
    holder      TEXT        NOT NULL,
    acquired_at TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL
);

-- At most one notification per plan per phase: inserted with ON CONFLICT
-- DO NOTHING in the transaction of the status change that caused it, and
-- deleted by Retry, which starts a new phase.
CREATE TABLE notification_claim (
    plan_id    BIGINT PRIMARY KEY REFERENCES plan (id) ON DELETE CASCADE,
    event      TEXT        NOT NULL CHECK (event IN ('PIPELINE_FAILED', 'PIPELINE_COMPLETED')),
    claimed_at TIMESTAMPTZ NOT NULL
);

-- The outbox: one row per notification and destination, written with the
-- claim, delivered by any replica. Kept after a Retry (history).
CREATE TABLE delivery (
    id               BIGSERIAL PRIMARY KEY,
    -- Sent as X-Baton-Delivery on every attempt: the receiver's
    -- idempotency key.
    delivery_key     TEXT        NOT NULL UNIQUE,
    plan_id          BIGINT      NOT NULL REFERENCES plan (id) ON DELETE CASCADE,
    event            TEXT        NOT NULL,
    url              TEXT        NOT NULL,
    -- The plan webhook's own secret; NULL = BATON_WEBHOOK_SECRET.
    secret           TEXT,
    payload          TEXT        NOT NULL,
    created_at       TIMESTAMPTZ NOT NULL,
    state            TEXT        NOT NULL CHECK (state IN ('PENDING', 'DELIVERED', 'FAILED')),
    attempts         BIGINT      NOT NULL DEFAULT 0,
    next_attempt_at  TIMESTAMPTZ NOT NULL,
    -- A replica sending it now; another may take over after locked_until.
    locked_by        TEXT,
    locked_until     TIMESTAMPTZ,
    delivered_at     TIMESTAMPTZ,
    last_status_code BIGINT,
    last_error       TEXT
);
CREATE INDEX delivery_due ON delivery (next_attempt_at) WHERE state = 'PENDING';
CREATE INDEX delivery_plan ON delivery (plan_id, id);

CREATE TABLE delivery_attempt (
    id          BIGSERIAL PRIMARY KEY,
    delivery_id BIGINT      NOT NULL REFERENCES delivery (id) ON DELETE CASCADE,
    attempt     BIGINT      NOT NULL,
    replica_id  TEXT        NOT NULL,
    at          TIMESTAMPTZ NOT NULL,
    status_code BIGINT,
    error       TEXT
);
CREATE INDEX delivery_attempt_delivery ON delivery_attempt (delivery_id, id);
