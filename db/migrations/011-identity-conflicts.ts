// Migration 11 of the mirror's schema, in a file of its own so a shipped one is never touched again (the list: db/migrations.ts).
import type { Migration } from '../migrate.js';

/**
 * Version 11: a run's identity conflicts with their ids (db/identity-conflicts.ts),
 * the first 20 of each run, written with the run's final row. Until now only
 * their count was kept (`sync_runs.identity_conflicts`, migration 8) and the
 * ids went to the log alone: `status` reads these to name the ids the
 * service listed but the mirror does not answer as listed. Dropped with
 * `rejected_records` (CHANGE_LOG_RETENTION_DAYS).
 */
const v11sql = /* sql */ `
CREATE TABLE identity_conflicts (
  id             INTEGER PRIMARY KEY,
  run_id         INTEGER NOT NULL,
  -- 'user_id': one user_id listed under two client_user_ids (earlier/later are client_user_ids);
  -- 'client_user_id': one client_user_id listed for two users (earlier/later are user_ids).
  kind           TEXT    NOT NULL CHECK (kind IN ('user_id', 'client_user_id')),
  user_id        TEXT,
  team_id        TEXT,
  client_user_id TEXT,
  earlier        TEXT    NOT NULL,
  later          TEXT    NOT NULL,
  at             TEXT    NOT NULL
) STRICT;
CREATE INDEX identity_conflicts_run ON identity_conflicts (run_id);
`;

export const identityConflictIds: Migration = { version: 11, name: 'identity-conflicts', sql: v11sql };
