// Migration 8 of the mirror's schema, in a file of its own so a shipped one is never touched again (the list: db/migrations.ts).
import type { Migration } from '../migrate.js';

/**
 * Version 8: a run's anomalies, as facts on its row (src/sync/engine.ts):
 * identity conflicts within the scan (db/identity-conflicts.ts), pages that
 * carried more records than asked for, and the lowest `total` any page
 * reported (a listing that collapsed mid-scan).
 */
const v8sql = /* sql */ `
ALTER TABLE sync_runs ADD COLUMN identity_conflicts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_runs ADD COLUMN oversize_pages INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_runs ADD COLUMN total_lowest INTEGER;
`;

export const runAnomalies: Migration = { version: 8, name: 'run-anomalies', sql: v8sql };
