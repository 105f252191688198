/**
 * Retention of soft-deleted users (DELETED_RETENTION_DAYS): a user the
 * service confirmed deleted stays in the mirror, flagged, for analytics and
 * `resolve --include-deleted`; past the retention its row, its sources and
 * its field warnings go. Without it the mirror only grows under churn
 * (58,192 deleted users kept in an afternoon's measurement).
 *
 * The change feed keeps its own retention (CHANGES_RETENTION_DAYS): an
 * event about a purged user stays in the feed until then. `user_changes`
 * and `sync_runs` are the log and are kept. Freed pages are reused by later
 * writes; the file is never shrunk (no VACUUM), because readers map it
 * (db/open.ts `mapped`) and a map of a shrunk file faults.
 */
import type { Db } from './open.js';

/** How many users one purge removes at most: bounds the write lock it holds. */
export const PURGE_BATCH = 10_000;

/**
 * Removes users deleted before `cutoff` (ISO 8601), at most `limit`, in one
 * write transaction, waiting at most `waitMs` for the write lock. Returns how
 * many users were removed.
 */
export function purgeDeletedUsers(db: Db, cutoff: string, limit = PURGE_BATCH, waitMs = 200): number {
  const previous = db.pragma('busy_timeout', { simple: true });
  db.pragma(`busy_timeout = ${waitMs}`);
  try {
    return db
      .transaction(() => {
        db.exec(`CREATE TEMP TABLE IF NOT EXISTS purge_ids (user_id TEXT PRIMARY KEY) WITHOUT ROWID; DELETE FROM temp.purge_ids;`);
        db.prepare(
          `INSERT INTO temp.purge_ids SELECT user_id FROM users INDEXED BY users_content WHERE deleted_at IS NOT NULL AND deleted_at < ? LIMIT ?`,
        ).run(cutoff, limit);
        db.exec(`DELETE FROM connected_sources WHERE user_id IN (SELECT user_id FROM temp.purge_ids)`);
        db.exec(`DELETE FROM field_warnings WHERE user_id IN (SELECT user_id FROM temp.purge_ids)`);
        const removed = db.prepare(`DELETE FROM users WHERE user_id IN (SELECT user_id FROM temp.purge_ids)`).run().changes;
        db.exec(`DELETE FROM temp.purge_ids`);
        return removed;
      })
      .immediate();
  } finally {
    db.pragma(`busy_timeout = ${Number(previous)}`);
  }
}
