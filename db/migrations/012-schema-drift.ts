// Migration 12 of the mirror's schema, in a file of its own so a shipped one is never touched again (the list: db/migrations.ts).
import type { Migration } from '../migrate.js';

/**
 * Version 12: schema drift (db/schema-drift.ts). `run_field_warnings` counts,
 * per published run, the records written that carried each (field, rule)
 * warning, `field` being the top-level name and `rule` one of a fixed set
 * (src/service/warning-rules.ts; `new_field` for a key the schema does not
 * know). Dropped with `rejected_records` (CHANGE_LOG_RETENTION_DAYS).
 * `schema_drift` keeps every (field, rule) pair the mirror has met and the
 * run that met it first, so "first time" survives restarts and retention.
 */
const v12sql = /* sql */ `
CREATE TABLE run_field_warnings (
  id      INTEGER PRIMARY KEY,
  run_id  INTEGER NOT NULL,
  field   TEXT    NOT NULL,
  rule    TEXT    NOT NULL,
  records INTEGER NOT NULL CHECK (records > 0),
  at      TEXT    NOT NULL,
  UNIQUE (run_id, field, rule)
) STRICT;
CREATE TABLE schema_drift (
  field         TEXT    NOT NULL,
  rule          TEXT    NOT NULL,
  first_run_id  INTEGER NOT NULL,
  first_seen_at TEXT    NOT NULL,
  PRIMARY KEY (field, rule)
) STRICT;
`;

export const schemaDrift: Migration = { version: 12, name: 'schema-drift', sql: v12sql };
