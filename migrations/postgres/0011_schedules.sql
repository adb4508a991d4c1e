-- Schedules (SPEC §3, last paragraph): plans made from a template on a
-- cron expression in a time zone, exactly one per due tick across every
-- replica. The SQLite schema in migrations/sqlite/ has the same tables.

CREATE TABLE schedule (
    id             BIGSERIAL   PRIMARY KEY,
    name           TEXT        NOT NULL UNIQUE,
    cron           TEXT        NOT NULL,
    time_zone      TEXT        NOT NULL,
    overlap        TEXT        NOT NULL CHECK (overlap IN ('skip', 'queue', 'allow')),
    catch_up       TEXT        NOT NULL CHECK (catch_up IN ('none', 'latest', 'all')),
    catch_up_limit BIGINT      NOT NULL,
    -- JSON object of parameter values, and the plan document with its
    -- ${...} still in place.
    params         TEXT        NOT NULL,
    template       TEXT        NOT NULL,
    -- The first tick not yet handled; NULL when the expression never
    -- fires again. Only a round that locks the row moves it.
    next_tick_at   TIMESTAMPTZ,
    paused_by      TEXT,
    paused_at      TIMESTAMPTZ,
    created_at     TIMESTAMPTZ NOT NULL,
    created_by     TEXT        NOT NULL,
    updated_at     TIMESTAMPTZ NOT NULL,
    updated_by     TEXT        NOT NULL
);
-- What the leader's round reads: the schedules due, soonest first.
CREATE INDEX schedule_due ON schedule (next_tick_at) WHERE paused_by IS NULL;

-- One row per handled tick: its primary key is the exactly-once claim.
-- A round inserts it first (ON CONFLICT DO NOTHING) in the transaction
-- that makes the plan, so a tick handled by another round, or by a leader
-- that died after committing, is never made twice; one that died before
-- committing left nothing, and the next round makes it.
CREATE TABLE schedule_tick (
    schedule_id BIGINT      NOT NULL REFERENCES schedule (id) ON DELETE CASCADE,
    tick_at     TIMESTAMPTZ NOT NULL,
    -- created: a plan was made and started; queued: made, waiting for the
    -- previous plan; skipped: none made (overlap: skip); missed: a run of
    -- ticks no leader fired in time that catch-up passed over (tick_at is
    -- the first of them); failed: the template no longer makes a valid plan.
    outcome     TEXT        NOT NULL CHECK (outcome IN
                    ('created', 'queued', 'skipped', 'missed', 'failed')),
    plan_id     BIGINT,
    detail      TEXT,
    recorded_at TIMESTAMPTZ NOT NULL,
    recorded_by TEXT        NOT NULL,
    PRIMARY KEY (schedule_id, tick_at)
);

-- Which schedule and tick made a plan (a trigger has no tick), and
-- whether it waits to start behind the schedule's previous plan.
ALTER TABLE plan ADD COLUMN schedule_id BIGINT;
ALTER TABLE plan ADD COLUMN schedule_tick_at TIMESTAMPTZ;
ALTER TABLE plan ADD COLUMN queued BOOLEAN NOT NULL DEFAULT FALSE;
CREATE UNIQUE INDEX plan_schedule_tick ON plan (schedule_id, schedule_tick_at)
    WHERE schedule_tick_at IS NOT NULL;
CREATE INDEX plan_schedule ON plan (schedule_id, id) WHERE schedule_id IS NOT NULL;
-- The queued plans, which every schedule round looks at.
CREATE INDEX plan_queued ON plan (schedule_id, id) WHERE queued;
