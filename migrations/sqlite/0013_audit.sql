-- The audit log: SQLite flavour of migrations/postgres/0015_audit.sql,
-- which says what each column holds. Times are Unix microseconds.
CREATE TABLE audit (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    at            INTEGER NOT NULL,
    actor         TEXT    NOT NULL,
    address       TEXT,
    forwarded_for TEXT,
    action        TEXT    NOT NULL,
    outcome       TEXT    NOT NULL CHECK (outcome IN ('done', 'refused')),
    subject       TEXT    NOT NULL,
    plan_id       INTEGER,
    task_id       INTEGER,
    schedule_id   INTEGER,
    target        TEXT,
    detail        TEXT    NOT NULL
) STRICT;

CREATE INDEX audit_actor ON audit (actor, id);
CREATE INDEX audit_action ON audit (action, id);
CREATE INDEX audit_at ON audit (at);
