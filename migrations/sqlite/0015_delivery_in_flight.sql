-- Deliveries in flight (taken, not yet recorded), by URL: taking due
-- deliveries counts them to keep a slow receiver to a few senders. The
-- record clears `locked_until`, so this index holds only the few rows
-- being sent and those whose sender died.
CREATE INDEX delivery_in_flight ON delivery (url, locked_until)
    WHERE locked_until IS NOT NULL;
