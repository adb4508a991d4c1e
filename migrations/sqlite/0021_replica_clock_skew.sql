-- How far the replica's host clock was from the database's at its last
-- heartbeat (host minus database, milliseconds). A SQLite database's clock
-- is its host's, so this stays 0; the column keeps both schemas alike.
-- Migrations are numbered alike on both backends from this one on.
ALTER TABLE replica ADD COLUMN clock_skew_ms INTEGER NOT NULL DEFAULT 0;
