// Migration 13 of the mirror's schema, in a file of its own so a shipped one is never touched again (the list: db/migrations.ts).
import type { Migration } from '../migrate.js';

/**
 * Version 13: where a follower's run read its data from (docs/followers.md).
 * A mirror whose SERVICE_BASE_URL is another mirror's replica (a leader)
 * gets the leader's freshness headers on each page (src/service/source-freshness.ts);
 * the run keeps them, so that `status`, /readyz and /metrics can give the age
 * of the data at its source, not only of the follower's own copy, and the
 * next run can tell a restored leader (another epoch). NULL on every run of
 * a mirror that reads the service itself.
 */
const v13sql = /* sql */ `
ALTER TABLE sync_runs ADD COLUMN source_run_id INTEGER;
ALTER TABLE sync_runs ADD COLUMN source_published_at TEXT;
ALTER TABLE sync_runs ADD COLUMN source_at TEXT;
ALTER TABLE sync_runs ADD COLUMN source_epoch TEXT;
ALTER TABLE sync_runs ADD COLUMN source_restored_at TEXT;
-- The leader's change-feed cursor the run's data reaches: an incremental run (src/sync/follow-feed.ts) reads after it.
ALTER TABLE sync_runs ADD COLUMN source_cursor INTEGER;
`;

export const runSource: Migration = { version: 13, name: 'run-source', sql: v13sql };
