import type { Migration } from '../migrate.js';

/**
 * Audit migration 2: which management service a row is about. `target` is
 * the target of the worker that handled the job (jobs/removal-queue.ts: 16
 * hex digits of SHA-256 over its canonical MANAGEMENT_URL): where its DELETE
 * went, or would have gone for a job it refused. NULL for rows written
 * before removals named their target.
 */
export const removalTarget: Migration = {
  version: 2,
  name: 'removal-target',
  sql: `ALTER TABLE member_removals ADD COLUMN target TEXT;`,
};
