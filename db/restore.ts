/**
 * What a restore changes in the copy it installs (the file work is the
 * command's, src/commands/restore.ts): the feed moves to a new epoch and
 * above every cursor the lost file can have issued, a `restore` row records
 * it, and a `mirror.restored` event opens the new span. One transaction:
 * a copy is marked wholly or not at all. See db/lineage.ts for why.
 */
import { randomBytes } from 'node:crypto';
import { ChangeFeed } from './change-feed.js';
import { cursorBase, lastCursor, latestKnownState, readBackupMark, type RestoreMark } from './lineage.js';
import type { Db } from './open.js';

/** The tables that make a SQLite file a mirror (a backup of something else is refused). */
const MIRROR_TABLES = ['users', 'sync_runs', 'change_events', 'change_feed', 'history_state'];

/** The mirror tables `db` lacks: empty for a mirror. */
export function missingMirrorTables(db: Db): string[] {
  const has = db.prepare<[string], number>(`SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?`).pluck();
  return MIRROR_TABLES.filter((t) => has.get(t) === 0);
}

/**
 * Marks `copy` (migrated to this build's schema) as restored at `now`, over
 * a replaced file whose last cursor was `replacedCursor` (null: unknown,
 * the file was lost). A copy no backup wrote (a plain `sqlite3 .backup`, a
 * Litestream restore) counts as taken at its last publish, or at the restore
 * its file came from if that is later (db/lineage.ts latestKnownState).
 */
export function markRestore(copy: Db, replacedCursor: number | null, now: Date): RestoreMark {
  const at = now.toISOString();
  const backup = readBackupMark(copy);
  const backupCursor = lastCursor(copy);
  const mark: RestoreMark = {
    at,
    backupAt: backup?.backupAt ?? latestKnownState(copy) ?? at,
    backupCursor,
    cursorBase: cursorBase(backupCursor, replacedCursor, now.getTime()),
    replacedCursor,
  };
  copy.transaction(() => {
    copy
      .prepare(
        `UPDATE sync_runs SET status = 'failed', finished_at = ?, error = 'interrupted: the backup was taken during this run'
         WHERE status = 'running'`,
      )
      .run(at);
    copy.prepare(`DELETE FROM sync_lease`).run();
    copy.prepare(`UPDATE change_feed SET epoch = ? WHERE id = 1`).run(randomBytes(4).toString('hex'));
    const moved = copy.prepare(`UPDATE sqlite_sequence SET seq = ? WHERE name = 'change_events'`).run(mark.cursorBase).changes;
    if (moved === 0) copy.prepare(`INSERT INTO sqlite_sequence (name, seq) VALUES ('change_events', ?)`).run(mark.cursorBase);
    copy
      .prepare(
        `INSERT INTO mirror_lineage (event, at, backup_at, backup_run_id, backup_cursor, replaced_cursor, cursor_base, epoch)
         VALUES ('restore', @at, @backupAt, @run, @backupCursor, @replaced, @base, (SELECT epoch FROM change_feed WHERE id = 1))`,
      )
      .run({
        at,
        backupAt: mark.backupAt,
        run: backup?.backupRunId ?? null,
        backupCursor,
        replaced: replacedCursor,
        base: mark.cursorBase,
      });
    new ChangeFeed(copy).appendRestored(mark);
  })();
  return mark;
}
