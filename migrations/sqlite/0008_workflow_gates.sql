-- Workflow gates (SPEC §3, gates 2 and 6-9): halt on failure,
-- dependencies and stages, approvals, pause and target capacity.

-- "Task task_id may start only once task depends_on is DONE or SKIPPED."
-- A stage is stored as the edges it implies. `satisfied` turns true when
-- depends_on completes (it never turns back: DONE and SKIPPED are final),
-- so the open edges of a task are an index seek however many it had.
CREATE TABLE task_dependency (
    task_id    INTEGER NOT NULL REFERENCES task (id) ON DELETE CASCADE,
    depends_on INTEGER NOT NULL REFERENCES task (id) ON DELETE CASCADE,
    satisfied  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (task_id, depends_on)
) STRICT;
CREATE INDEX task_dependency_depends_on ON task_dependency (depends_on);
CREATE INDEX task_dependency_open ON task_dependency (task_id, depends_on) WHERE NOT satisfied;

-- How many of the task's dependencies are not DONE or SKIPPED yet; only
-- falls. Stage and approval as the plan file gave them.
ALTER TABLE task ADD COLUMN deps_open INTEGER NOT NULL DEFAULT 0;
ALTER TABLE task ADD COLUMN has_dependents INTEGER NOT NULL DEFAULT 0;
ALTER TABLE task ADD COLUMN stage TEXT;
-- NULL, 'required' or 'two-person'.
ALTER TABLE task ADD COLUMN approval TEXT;
-- JSON array of user names who may approve; NULL = any operator.
ALTER TABLE task ADD COLUMN approvers TEXT;
ALTER TABLE task ADD COLUMN approved_by TEXT;
ALTER TABLE task ADD COLUMN approved_at INTEGER;

-- Copies on the run, like its other gate fields, so the promoter reads one
-- table: `held` while a dependency is open (the promoter reads a held run
-- only when it carries a version, which larger versions wait for: a
-- 10,000-task chain would otherwise cost every round 10,000 rows),
-- `dependents` when some task waits for this one (its transitions refresh
-- their waiting causes), `approval_pending` until an operator approves
-- the task.
ALTER TABLE task_run ADD COLUMN held INTEGER NOT NULL DEFAULT 0;
ALTER TABLE task_run ADD COLUMN dependents INTEGER NOT NULL DEFAULT 0;
ALTER TABLE task_run ADD COLUMN approval_pending INTEGER NOT NULL DEFAULT 0;
-- What a promotion round reads: the PENDING runs that are not held (the
-- PENDING index, now led by `held`, so no run pays for a second index
-- entry), and the held ones with a version (rare, an index of their own).
DROP INDEX task_run_pending;
CREATE INDEX task_run_pending ON task_run (held, id) WHERE status = 'PENDING';
CREATE INDEX task_run_held_versions ON task_run (id)
    WHERE status = 'PENDING' AND held AND version IS NOT NULL;

-- Runs whose task may have ended badly: the halt gate reads the versioned
-- ones per target, the dependency causes one plan's.
CREATE INDEX task_run_halting ON task_run (target) WHERE status IN ('FAILED', 'CANCELED') AND version IS NOT NULL;
CREATE INDEX task_run_ended_badly ON task_run (plan_id) WHERE status IN ('FAILED', 'CANCELED');

ALTER TABLE plan ADD COLUMN paused_by TEXT;
ALTER TABLE plan ADD COLUMN paused_at INTEGER;
-- The paused plans, which every promotion round reads.
CREATE INDEX plan_paused ON plan (id) WHERE paused_by IS NOT NULL;
-- JSON array of the plan's stages in order: [{"name", "approval"}].
ALTER TABLE plan ADD COLUMN stages TEXT NOT NULL DEFAULT '[]';

-- Operator settings of a target across every plan: a pause (the brake
-- during an incident) and a capacity (at most N runs hold it at once; an
-- exclusive run takes all of it). No row = not paused, no capacity.
CREATE TABLE target_setting (
    target     TEXT    PRIMARY KEY,
    capacity   INTEGER CHECK (capacity IS NULL OR capacity >= 1),
    paused_by  TEXT,
    paused_at  INTEGER,
    updated_by TEXT    NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
