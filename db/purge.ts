/**
 * Retention of soft-deleted users (DELETED_RETENTION_DAYS): a user the
 * service confirmed deleted stays in the mirror, flagged, for analytics and
 * `resolve --include-deleted`; past the retention its row, its sources and
 * its field warnings go. Without it the mirror only grows under churn
 * (58,192 deleted users kept in an afternoon's measurement).
 *
 * The change feed keeps its own retention (CHANGES_RETENTION_DAYS): an
 * event about a purged user stays in the feed until then. The run's detail
 * rows, `user_changes` and `rejected_records`, go after
 * CHANGE_LOG_RETENTION_DAYS (purgeChangeLog); `sync_runs` rows are kept (a
 * few hundred bytes a run). History (db/history.ts) is untouched by both:
 * it has its own retention, HISTORY_RETENTION_DAYS (purgeHistory), off by
 * default. Freed pages are reused by later writes; the
 * file is not vacuumed automatically (docs/operations.md says why, and how
 * by hand).
 */
import type { Db } from './open.js';

/** How many users (or log rows) one purge removes at most: bounds the write lock it holds. */
const PURGE_BATCH = 10_000;

/**
 * Removes users deleted before `cutoff` (ISO 8601), at most `limit`, in one
 * write transaction, waiting at most `waitMs` for the write lock. Returns how
 * many users were removed.
 */
export function purgeDeletedUsers(db: Db, cutoff: string, limit = PURGE_BATCH, waitMs = 200): number {
  return briefly(db, waitMs, () => {
    db.exec(`CREATE TEMP TABLE IF NOT EXISTS purge_ids (user_id TEXT PRIMARY KEY) WITHOUT ROWID; DELETE FROM temp.purge_ids;`);
    db.prepare(
      `INSERT INTO temp.purge_ids SELECT user_id FROM users INDEXED BY users_content WHERE deleted_at IS NOT NULL AND deleted_at < ? LIMIT ?`,
    ).run(cutoff, limit);
    db.exec(`DELETE FROM connected_sources WHERE user_id IN (SELECT user_id FROM temp.purge_ids)`);
    db.exec(`DELETE FROM field_warnings WHERE user_id IN (SELECT user_id FROM temp.purge_ids)`);
    const removed = db.prepare(`DELETE FROM users WHERE user_id IN (SELECT user_id FROM temp.purge_ids)`).run().changes;
    db.exec(`DELETE FROM temp.purge_ids`);
    return removed;
  });
}

/**
 * Removes `user_changes`, `rejected_records`, `identity_conflicts` and `run_field_warnings` rows written before `cutoff`,
 * at most `limit` of each, oldest first. Rows are written in time order, so
 * only the oldest `limit` rows by id are looked at: no scan of the whole log
 * when nothing is old enough. Returns how many rows were removed.
 */
export function purgeChangeLog(db: Db, cutoff: string, limit = PURGE_BATCH, waitMs = 200): number {
  return briefly(db, waitMs, () => {
    let removed = 0;
    for (const table of ['user_changes', 'rejected_records', 'identity_conflicts', 'run_field_warnings']) {
      removed += db
        .prepare(`DELETE FROM ${table} WHERE id IN (SELECT id FROM ${table} ORDER BY id LIMIT ?) AND at < ?`)
        .run(limit, cutoff).changes;
    }
    return removed;
  });
}

/**
 * Removes user versions and source connections that ended before `cutoff`,
 * at most `limit` of each, and moves history's start (complete_since) up to
 * the cutoff: a question about a time before it could meet a dropped
 * version, so it must be answered "unknown", never "no". Open versions and
 * connections are kept whatever their age. Returns how many rows were removed.
 */
export function purgeHistory(db: Db, cutoff: string, limit = PURGE_BATCH, waitMs = 200): number {
  return briefly(db, waitMs, () => {
    let removed = 0;
    let safeFrom: string | undefined;
    for (const [table, end] of [
      ['user_versions', 'valid_to'],
      ['source_connections', 'disconnected_at'],
    ] as const) {
      const dropped = db
        .prepare(`DELETE FROM ${table} WHERE id IN (SELECT id FROM ${table} WHERE ${end} < ? ORDER BY ${end} LIMIT ?)`)
        .run(cutoff, limit).changes;
      if (dropped === 0) continue;
      removed += dropped;
      // Oldest first: what a batch left (it stopped at `limit`) ended no earlier than what it dropped.
      const left = db.prepare<[string], string | null>(`SELECT min(${end}) FROM ${table} WHERE ${end} < ?`).pluck().get(cutoff);
      const bound = left ?? cutoff;
      if (safeFrom === undefined || bound > safeFrom) safeFrom = bound;
    }
    if (safeFrom !== undefined) {
      db.prepare(`UPDATE history_state SET complete_since = max(complete_since, ?) WHERE id = 1 AND complete_since IS NOT NULL`).run(
        safeFrom,
      );
    }
    return removed;
  });
}

/** One write transaction that waits at most `waitMs` for the lock: a purge gives way to a sync, never the reverse. */
function briefly<T>(db: Db, waitMs: number, work: () => T): T {
  const previous = db.pragma('busy_timeout', { simple: true });
  db.pragma(`busy_timeout = ${waitMs}`);
  try {
    return db.transaction(work).immediate();
  } finally {
    db.pragma(`busy_timeout = ${Number(previous)}`);
  }
}
