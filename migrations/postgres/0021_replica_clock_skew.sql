-- How far the replica's host clock was from the database's at its last
-- heartbeat (host minus database, milliseconds). Baton itself keeps to the
-- database's clock; this is shown so an operator can mend the host.
-- Migrations are numbered alike on both backends from this one on.
ALTER TABLE replica ADD COLUMN clock_skew_ms BIGINT NOT NULL DEFAULT 0;
