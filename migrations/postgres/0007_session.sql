-- Dashboard sign-ins (SPEC §9). The cookie carries a random token; only its
-- SHA-256 is kept, so reading this table does not let anyone sign in. Every
-- replica reads the same rows, so a session works behind any of them.
CREATE TABLE session (
    token_hash TEXT PRIMARY KEY,
    user_name  TEXT        NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);

-- Expired sessions are deleted at each sign-in.
CREATE INDEX session_expires_at ON session (expires_at);
