-- Dashboard sign-ins, SQLite flavour of migrations/postgres/0007.

CREATE TABLE session (
    token_hash TEXT PRIMARY KEY,
    user_name  TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;

CREATE INDEX session_expires_at ON session (expires_at);
