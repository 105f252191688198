import type { Migration } from '../migrate.js';
import { memberRemovals } from '../migrations/002-member-removals.js';

/**
 * Audit migration 1: the removal audit in a file of its own (AUDIT_DB). The
 * tables are those of mirror migration 2, which stays in the mirror's set
 * (a shipped migration is never edited) but is no longer written there.
 *
 * `legacy_audit_import` records the one copy of the rows an older version
 * wrote into the mirror file (db/open-audit.ts): one row, written in the same
 * transaction as the copy, so the copy happens exactly once.
 */
export const auditSchema: Migration = {
  version: 1,
  name: 'member-removals',
  sql: `${memberRemovals.sql}
CREATE TABLE legacy_audit_import (
  id           INTEGER PRIMARY KEY CHECK (id = 1),
  -- The mirror file rows were copied from; NULL when there was none to copy.
  source       TEXT,
  removals     INTEGER NOT NULL,
  duplicates   INTEGER NOT NULL,
  imported_at  TEXT    NOT NULL
) STRICT;
`,
};
