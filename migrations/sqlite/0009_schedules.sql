-- Schedules (SPEC §3, last paragraph): plans made from a template on a
-- cron expression in a time zone, exactly one per due tick across every
-- replica. Times are Unix microseconds, as in every SQLite table here.

CREATE TABLE schedule (
    -- AUTOINCREMENT: a deleted schedule's id is never given again, so its
    -- plans (which keep schedule_id) never join a new schedule.
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    name           TEXT        NOT NULL UNIQUE,
    cron           TEXT        NOT NULL,
    time_zone      TEXT        NOT NULL,
    overlap        TEXT        NOT NULL CHECK (overlap IN ('skip', 'queue', 'allow')),
    catch_up       TEXT        NOT NULL CHECK (catch_up IN ('none', 'latest', 'all')),
    catch_up_limit INTEGER NOT NULL,
    -- JSON object of parameter values, and the plan document with its
    -- ${...} still in place.
    params         TEXT        NOT NULL,
    template       TEXT        NOT NULL,
    -- The first tick not yet handled; NULL when the expression never
    -- fires again. Only a round that locks the row moves it.
    next_tick_at   INTEGER,
    paused_by      TEXT,
    paused_at      INTEGER,
    created_at     INTEGER NOT NULL,
    created_by     TEXT        NOT NULL,
    updated_at     INTEGER NOT NULL,
    updated_by     TEXT        NOT NULL
) STRICT;
-- What the leader's round reads: the schedules due, soonest first.
CREATE INDEX schedule_due ON schedule (next_tick_at) WHERE paused_by IS NULL;

-- One row per handled tick: its primary key is the exactly-once claim.
-- A round inserts it first (ON CONFLICT DO NOTHING) in the transaction
-- that makes the plan, so a tick handled by another round, or by a leader
-- that died after committing, is never made twice; one that died before
-- committing left nothing, and the next round makes it.
CREATE TABLE schedule_tick (
    schedule_id INTEGER NOT NULL REFERENCES schedule (id) ON DELETE CASCADE,
    tick_at     INTEGER NOT NULL,
    -- created: a plan was made and started; queued: made, waiting for the
    -- previous plan; skipped: none made (overlap: skip); missed: a run of
    -- ticks no leader fired in time that catch-up passed over (tick_at is
    -- the first of them); failed: the template no longer makes a valid plan.
    outcome     TEXT        NOT NULL CHECK (outcome IN
                    ('created', 'queued', 'skipped', 'missed', 'failed')),
    plan_id     INTEGER,
    detail      TEXT,
    recorded_at INTEGER NOT NULL,
    recorded_by TEXT        NOT NULL,
    PRIMARY KEY (schedule_id, tick_at)
) STRICT;

-- Which schedule and tick made a plan (a trigger has no tick), and
-- whether it waits to start behind the schedule's previous plan.
ALTER TABLE plan ADD COLUMN schedule_id INTEGER;
ALTER TABLE plan ADD COLUMN schedule_tick_at INTEGER;
ALTER TABLE plan ADD COLUMN queued INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX plan_schedule_tick ON plan (schedule_id, schedule_tick_at)
    WHERE schedule_tick_at IS NOT NULL;
CREATE INDEX plan_schedule ON plan (schedule_id, id) WHERE schedule_id IS NOT NULL;
-- The queued plans, which every schedule round looks at.
CREATE INDEX plan_queued ON plan (schedule_id, id) WHERE queued;
