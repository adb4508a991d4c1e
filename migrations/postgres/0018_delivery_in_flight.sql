-- Where a delivery goes, as scheme, host and port (`https://hooks.example`):
-- taking due deliveries counts those in flight (taken, not yet recorded)
-- per destination, to keep a slow receiver to a few senders however many
-- URLs it has. NULL for rows queued before this migration or by an older
-- replica: those are not counted.
ALTER TABLE delivery ADD COLUMN destination TEXT;
-- The record clears `locked_until`, so this index holds only the few rows
-- being sent and those whose sender died.
CREATE INDEX delivery_in_flight ON delivery (destination, locked_until)
    WHERE locked_until IS NOT NULL;
