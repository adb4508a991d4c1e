-- Retention looks for plans to prune oldest first, from where its last
-- search stopped: (created_at, id) is its keyset.
CREATE INDEX plan_created ON plan (created_at, id);
