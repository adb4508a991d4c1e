-- What the sweeper remembers of the stretches nobody could write
-- (docs/design.md, "Liveness"): when the last round that judged began,
-- and how long verdicts are judged earlier, until when. Kept here, not in
-- the leader's memory, so a replica that takes the lease in the middle of
-- such a stretch, or just after one, judges with what its predecessor saw.
CREATE TABLE sweep_memory (
    id                INTEGER PRIMARY KEY CHECK (id = 1),
    judged_at         INTEGER,
    written_off_ms    INTEGER NOT NULL DEFAULT 0 CHECK (written_off_ms >= 0),
    written_off_until INTEGER
) STRICT;
INSERT INTO sweep_memory (id) VALUES (1);
