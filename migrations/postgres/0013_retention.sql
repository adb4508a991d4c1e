-- Retention looks for plans to prune oldest first, from where its last
-- search stopped: (created_at, id) is its keyset. Written once per plan at
-- submit and never changed (a plan's later updates stay HOT).
CREATE INDEX plan_created ON plan (created_at, id);
