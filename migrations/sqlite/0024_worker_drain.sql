-- An operator's drain of a replica or agent (docs/agents.md, "Draining"):
-- while set, the worker takes no new run, finishes what it runs, and its
-- labels no longer count as live for pinned tasks. Its heartbeat reads it
-- back; the heartbeat's upsert leaves both columns alone.
ALTER TABLE replica ADD COLUMN draining_since INTEGER;
ALTER TABLE replica ADD COLUMN draining_by TEXT;
