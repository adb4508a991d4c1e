-- The audit log (GET /api/v1/audit, the Audit page): every change a
-- person asked for — submit, retry, cancel, skip, approve, pause, bulk
-- actions, schedule changes — and every dashboard sign-in, failed
-- sign-in and sign-out, with who, when and from where. The scheduler's
-- and the replicas' own transitions are not here: the event history has
-- them. Written in the action's own transaction, so an action that rolls
-- back leaves no entry; written only by people, so it costs the hot path
-- nothing.
CREATE TABLE audit (
    id            BIGSERIAL   PRIMARY KEY,
    at            TIMESTAMPTZ NOT NULL,
    -- The user's name; for a failed sign-in, the name that was tried.
    actor         TEXT        NOT NULL,
    -- The client's IP address as the server's socket saw it (behind a
    -- proxy: the proxy's).
    address       TEXT,
    -- X-Forwarded-For as the client sent it: information for a reader,
    -- never used for a decision (anyone can send one).
    forwarded_for TEXT,
    -- A stable verb: plan.submit, task.retry, runs.bulk_retry,
    -- auth.sign_in_failed, … (docs/api.md lists them).
    action        TEXT        NOT NULL,
    -- done: the change was made; refused: the engine said no (409, 403,
    -- 422) and nothing changed.
    outcome       TEXT        NOT NULL CHECK (outcome IN ('done', 'refused')),
    -- What it touched, readable ("task 12 migrate of plan 3 release-42",
    -- "target db/orders", a runs filter), and the ids beside it for links.
    -- No foreign keys: the entry outlives what it names (a pruned plan, a
    -- deleted schedule).
    subject       TEXT        NOT NULL,
    plan_id       BIGINT,
    task_id       BIGINT,
    schedule_id   BIGINT,
    target        TEXT,
    -- How many runs, the capacity set, why it was refused.
    detail        TEXT        NOT NULL
);

-- The filters: who (exactly) and which actions (a prefix, expanded to the
-- known verbs), newest first; a time window, and retention's deletion of
-- the oldest.
CREATE INDEX audit_actor ON audit (actor, id);
CREATE INDEX audit_action ON audit (action, id);
CREATE INDEX audit_at ON audit (at);
