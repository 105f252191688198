// Migration 3 of the mirror's schema, in a file of its own so a shipped one is never touched again (the list: db/migrations.ts).
import type { Migration } from '../migrate.js';

/**
 * The sync lease (db/sync-lease.ts): at most one row, naming the process
 * that may write a sync into this file until `expires_at` (epoch ms; the
 * lease compares numbers, never text).
 */
export const syncLease: Migration = {
  version: 3,
  name: 'sync-lease',
  sql: `
CREATE TABLE sync_lease (
  id          INTEGER PRIMARY KEY CHECK (id = 1),
  holder      TEXT    NOT NULL,
  host        TEXT    NOT NULL,
  pid         INTEGER NOT NULL,
  acquired_at INTEGER NOT NULL,
  expires_at  INTEGER NOT NULL
) STRICT;
`,
};
