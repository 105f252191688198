// Migration 4 of the mirror's schema, in a file of its own so a shipped one is never touched again (the list: db/migrations.ts).
import type { Migration } from '../migrate.js';

/**
 * The field warnings of each user's stored record: the fields the parser
 * dropped (stored NULL in `users`) because they broke their rule. Holds the
 * current warnings only: whenever a user row is written, its warnings are
 * replaced. `run_id` is NULL for a row written by an online resolve.
 *
 * No foreign keys, as with connected_sources: users are never hard-deleted,
 * and the writer (db/user-writes.ts) writes a user and its warnings in one transaction.
 */
export const fieldWarnings: Migration = {
  version: 4,
  name: 'field-warnings',
  sql: `
CREATE TABLE field_warnings (
  user_id TEXT    NOT NULL,
  -- Path in the record as received: 'ingestion_start', 'connected_sources[2].provider.slug'.
  field   TEXT    NOT NULL,
  problem TEXT    NOT NULL,
  run_id  INTEGER,
  at      TEXT    NOT NULL,
  PRIMARY KEY (user_id, field)
) STRICT, WITHOUT ROWID;
`,
};
