// Migration 5 of the mirror's schema, in a file of its own so a shipped one is never touched again (the list: db/migrations.ts).
import type { Migration } from '../migrate.js';

/**
 * Verified deletions (src/sync/deletions.ts): what became of the users a
 * run did not list. `swept` keeps its column and now means "this run settled
 * deletions" (checked its candidates upstream), as documented in db/SCHEMA.md.
 */
export const verifiedDeletions: Migration = {
  version: 5,
  name: 'verified-deletions',
  sql: `
ALTER TABLE sync_runs ADD COLUMN candidates        INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_runs ADD COLUMN confirmed_gone    INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_runs ADD COLUMN still_there       INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_runs ADD COLUMN unverified        INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_runs ADD COLUMN deferred          INTEGER NOT NULL DEFAULT 0;
`,
};
