-- Idempotent submits: a client that retries a submit (a timeout, a dropped
-- connection) with the same Idempotency-Key gets the plan its first try
-- made instead of a second plan. Keys count for 24 hours.
CREATE TABLE plan_submission (
    idempotency_key TEXT    PRIMARY KEY,
    -- SHA-256 of the submitted document, hex: the same key with another
    -- document is refused.
    body_sha256     TEXT    NOT NULL,
    plan_id         INTEGER REFERENCES plan (id) ON DELETE CASCADE,
    created_at      INTEGER NOT NULL
) STRICT;
CREATE INDEX plan_submission_created_at ON plan_submission (created_at);
