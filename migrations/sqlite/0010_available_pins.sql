-- AVAILABLE runs pinned to a node label, which the leader's sweep reads
-- every round to drop the pins whose node is gone (SPEC §10, invariant 7).
-- Nearly always empty, so that read costs an index probe; the runs of a
-- queue under load (AVAILABLE, unpinned) never enter it.
--
-- Only adds an index: replicas of the release before keep working beside
-- it during a rolling upgrade (docs/deploy.md).
CREATE INDEX task_run_available_pinned ON task_run (id)
    WHERE status = 'AVAILABLE' AND node IS NOT NULL;
