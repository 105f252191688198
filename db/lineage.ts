/**
 * The mirror file's lineage (migration 10, `mirror_lineage`): the backups a
 * copy was taken as and the restores that installed it. A mirror is a
 * system of record, so a restore must never make the change feed or history
 * say what did not happen:
 *
 * - Cursors: the restored file's next cursor starts above `cursor_base`,
 *   which is above every cursor the lost file can have issued, and its event
 *   ids carry a new epoch: no cursor and no id is issued twice for different
 *   events. A consumer whose cursor lies between the backup's last cursor and
 *   the base took it from the lost file: the feed answers it with the restore
 *   (restoreCovering) instead of silently skipping or replaying.
 * - The base is the largest of the backup's and the replaced file's last
 *   cursors and the restore time in microseconds since 1970 (cursorBase):
 *   a file can only have issued more only by publishing over a thousand
 *   events a millisecond, on average, since its own last restore.
 * - History: between the backup and the first publish after the restore the
 *   mirror cannot know what it showed; an as-of question there is a gap.
 */
import type { Db } from './open.js';
import { hasTable } from './has-table.js';

/** One restore, as the feed and history read it. */
export interface RestoreMark {
  /** When the restore installed the file. */
  at: string;
  /** When the installed backup was taken. */
  backupAt: string;
  /** The feed's last cursor in the backup: a consumer resumes after it. */
  backupCursor: number;
  /** Cursors after the restore are above it. */
  cursorBase: number;
  /** The replaced file's last cursor, when it could be read. */
  replacedCursor: number | null;
}

/** A backup row, written into a copy (db/backup.ts). */
export interface BackupMark {
  backupAt: string;
  backupRunId: number | null;
  backupCursor: number;
}

/** Pure: the first cursor base above everything issued (see the file's doc). */
export function cursorBase(backupCursor: number, replacedCursor: number | null, restoredAtMs: number): number {
  return Math.max(backupCursor, replacedCursor ?? 0, Math.floor(restoredAtMs) * 1000);
}

/** Pure: the restore that makes `cursor` one the lost file issued, if any. */
export function restoreCovering(restores: readonly RestoreMark[], cursor: number): RestoreMark | undefined {
  return restores.find((r) => cursor > r.backupCursor && cursor <= r.cursorBase);
}

/** Pure: the restore whose history gap holds `at` (backup taken ≤ at < first publish after the restore), if any. */
export function gapHolding(gaps: readonly HistoryGap[], at: string): HistoryGap | undefined {
  return gaps.find((g) => at >= g.from && (g.to === null || at < g.to));
}

/** A span history cannot answer for: from the backup to the first publish after the restore (null: none yet). */
export interface HistoryGap {
  from: string;
  to: string | null;
  restoredAt: string;
}

interface RestoreRow {
  at: string;
  backup_at: string;
  backup_cursor: number;
  cursor_base: number;
  replaced_cursor: number | null;
}

/** Every restore of this file, oldest first; none for a file from before migration 10. */
export function readRestores(db: Db): RestoreMark[] {
  if (!hasTable(db, 'mirror_lineage')) return [];
  const rows = db
    .prepare<[], RestoreRow>(
      `SELECT at, backup_at, backup_cursor, cursor_base, replaced_cursor FROM mirror_lineage WHERE event = 'restore' ORDER BY id`,
    )
    .all();
  return rows.map((r) => ({
    at: r.at,
    backupAt: r.backup_at,
    backupCursor: r.backup_cursor,
    cursorBase: r.cursor_base,
    replacedCursor: r.replaced_cursor,
  }));
}

/** The history gaps restores left: each from its backup to the first run published after it. */
export function readHistoryGaps(db: Db): HistoryGap[] {
  const firstPublish = db
    .prepare<[string], string | null>(`SELECT min(published_at) FROM sync_runs WHERE published_at IS NOT NULL AND published_at > ?`)
    .pluck();
  return readRestores(db).map((r) => ({ from: r.backupAt, to: firstPublish.get(r.at) ?? null, restoredAt: r.at }));
}

/**
 * The backup row that describes a copy as a whole: the newest one, when no
 * restore row follows it. A `backup` row is written into a copy only, so a
 * live file holds one only as the backup an earlier restore installed; a
 * copy of such a file taken some other way (a Litestream restore, `sqlite3
 * .backup`) carries that old row followed by its restore row, and the old
 * row's time is not this copy's. Undefined for a copy no backup wrote.
 */
export function readBackupMark(db: Db): BackupMark | undefined {
  if (!hasTable(db, 'mirror_lineage')) return undefined;
  const row = db
    .prepare<[], { event: string; backup_at: string; backup_run_id: number | null; backup_cursor: number }>(
      `SELECT event, backup_at, backup_run_id, backup_cursor FROM mirror_lineage ORDER BY id DESC LIMIT 1`,
    )
    .get();
  if (row?.event !== 'backup') return undefined;
  return { backupAt: row.backup_at, backupRunId: row.backup_run_id, backupCursor: row.backup_cursor };
}

/**
 * When a copy no backup marked was at least taken: its last publish, or the
 * restore that installed the file it was copied from, whichever is later
 * (that file held the restore's state from then on). Null for neither.
 */
export function latestKnownState(db: Db): string | null {
  const lastPublish = db.prepare<[], string | null>(`SELECT max(published_at) FROM sync_runs`).pluck().get() ?? null;
  const lastRestore = readRestores(db).at(-1)?.at ?? null;
  if (lastPublish === null || lastRestore === null) return lastPublish ?? lastRestore;
  return lastPublish > lastRestore ? lastPublish : lastRestore;
}

/** The feed's last issued cursor (0 for none): sqlite_sequence keeps it even after retention dropped the events. */
export function lastCursor(db: Db): number {
  if (!hasTable(db, 'sqlite_sequence')) return 0;
  return db.prepare<[], number>(`SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'change_events'), 0)`).pluck().get() ?? 0;
}

/** The last published run's id, or null. */
function lastPublishedRun(db: Db): number | null {
  return db.prepare<[], number | null>(`SELECT max(id) FROM sync_runs WHERE published_at IS NOT NULL`).pluck().get() ?? null;
}

/**
 * Marks a copy as a backup taken at `at`: runs the copy caught mid-way
 * become failed (their process goes on in the live file, not in the copy),
 * and a `backup` row says what the copy holds. Call on the copy only.
 */
export function markBackup(db: Db, at: string): BackupMark {
  const mark: BackupMark = { backupAt: at, backupRunId: lastPublishedRun(db), backupCursor: lastCursor(db) };
  db.transaction(() => {
    db.prepare(
      `UPDATE sync_runs SET status = 'failed', finished_at = ?, error = 'interrupted: the backup was taken during this run'
       WHERE status = 'running'`,
    ).run(at);
    db.prepare(
      `INSERT INTO mirror_lineage (event, at, backup_at, backup_run_id, backup_cursor) VALUES ('backup', @at, @at, @run, @cursor)`,
    ).run({ at, run: mark.backupRunId, cursor: mark.backupCursor });
  })();
  return mark;
}

/** The newest restore as `status` names it: when, from which backup, the cursors lost and the history gap. */
export interface NewestRestore extends RestoreMark {
  /** The last run published in the installed backup, when a backup row said. */
  backupRunId: number | null;
  /** The history gap it left: from the backup to the first publish after it (null: none yet). */
  gapTo: string | null;
  /** How many restores the file has had, this one included. */
  restores: number;
}

/** The newest restore of this file; undefined for a file never restored (or from before migration 10). */
export function readNewestRestore(db: Db): NewestRestore | undefined {
  if (!hasTable(db, 'mirror_lineage')) return undefined;
  const restores = readRestores(db);
  const newest = restores.at(-1);
  if (newest === undefined) return undefined;
  const backupRunId =
    db
      .prepare<[], number | null>(`SELECT backup_run_id FROM mirror_lineage WHERE event = 'restore' ORDER BY id DESC LIMIT 1`)
      .pluck()
      .get() ?? null;
  const gapTo = readHistoryGaps(db).at(-1)?.to ?? null;
  return { ...newest, backupRunId, gapTo, restores: restores.length };
}
