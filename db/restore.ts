/**
 * A backup installed as the mirror or the audit file: the storage half of
 * `user-mirror restore` (src/commands/restore.ts keeps the arguments, the
 * open-holders check, the leftovers of killed restores and the output).
 *
 * 1. refuses a backup with a non-empty -wal beside it (not a complete copy);
 * 2. copies it to a private file beside the target and refuses the copy if
 *    it is not a SQLite file of this kind, is newer than this build's
 *    schema, or fails `quick_check`; the backup stays as it was;
 * 3. holds the replaced mirror's sync lease (no sync may start in it, on
 *    any host) and reads its last cursor;
 * 4. marks the copy restored (markRestore): a new feed epoch, cursors above
 *    any the lost file issued, a `mirror.restored` event, and a history gap
 *    from the backup to the next publish. One transaction: a copy is marked
 *    wholly or not at all. See db/lineage.ts for why;
 * 5. keeps the replaced file aside with its -wal and renames the copy into
 *    place: a reader sees the old file or the new one, never half of either;
 *    then opens it once, as a sync does, so its -wal and -shm are there with
 *    the file's modes and group.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, linkSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { syncFile } from './backup.js';
import { ChangeFeed } from './change-feed.js';
import { copyIntoPrivateFile, createPrivateFile } from './file-modes.js';
import { hasTable } from './has-table.js';
import { cursorBase, lastCursor, latestKnownState, readBackupMark, type RestoreMark } from './lineage.js';
import { latestVersion, readVersion, SchemaTooNewError } from './migrate.js';
import { MIGRATIONS } from './migrations.js';
import { checkpointMirror, openMirror, type Db, type OpenOptions } from './open.js';
import { AUDIT_MIGRATIONS } from './open-audit.js';
import { acquireSyncLease, type HeldLease } from './sync-lease.js';

/** A refusal: the target untouched. `busy`: a process or a sync holds the target (wait, or stop it); else the backup is unfit. */
export class RestoreRefused extends Error {
  constructor(
    message: string,
    readonly busy = false,
  ) {
    super(message);
  }
}

/** The files a restore writes beside the target, named by the command (src/health/restore-files.ts reads the names). */
export interface RestorePaths {
  /** The private copy checked and marked before it is renamed into place. */
  copy: string;
  /** Where the replaced file (and its -wal) is kept. */
  keepAs: string;
}

export interface InstalledBackup {
  installed: string;
  from: string;
  replacedKeptAs: string | null;
  schemaVersion: number;
  restore: RestoreMark | null;
  /** Why the installed file's -wal and -shm could not be made (the next sync makes them); null when they were. */
  walPairProblem: string | null;
}

/** Refuses a backup with a non-empty -wal beside it: on its own it is not a complete copy. */
export function refuseIncompleteBackup(backup: string): void {
  if (existsSync(`${backup}-wal`) && statSync(`${backup}-wal`).size > 0)
    throw new RestoreRefused(
      `${backup} has a -wal beside it: it is not a complete copy on its own (open it once with sqlite3 to fold the WAL in)`,
    );
}

/** Installs `backup` as `target` (steps 2-5 above; the caller ran refuseIncompleteBackup); throws RestoreRefused with the target untouched. */
export function installBackup(kind: 'mirror' | 'audit', backup: string, target: string, paths: RestorePaths, now: Date): InstalledBackup {
  const tmp = paths.copy;
  let replaced: Replaced = { cursor: null };
  try {
    rmSync(tmp, { force: true });
    createPrivateFile(tmp);
    copyIntoPrivateFile(backup, tmp);
    checkCopy(tmp, backup, kind);
    // Only a good backup gets as far as the mirror: a refused one leaves it untouched, byte for byte.
    if (kind === 'mirror') replaced = holdReplaced(target);
    const db = openMirror(tmp, openOptions(kind));
    let mark: RestoreMark | null = null;
    let schemaVersion: number;
    try {
      if (kind === 'mirror') mark = markRestore(db, replaced.cursor, now);
      checkpointMirror(db);
      schemaVersion = readVersion(db);
    } finally {
      db.close();
    }
    syncFile(tmp);
    // The old file's connection closes before the rename: closing after it, SQLite would remove the -wal and -shm
    // of the path, which are then the new file's.
    letGo(replaced);
    const keptAs = install(tmp, target, paths.keepAs);
    return {
      installed: target,
      from: backup,
      replacedKeptAs: keptAs,
      schemaVersion,
      restore: mark,
      walPairProblem: keepWalPair(kind, target),
    };
  } finally {
    letGo(replaced);
    for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(`${tmp}${suffix}`, { force: true });
  }
}

function openOptions(kind: 'mirror' | 'audit'): OpenOptions {
  return kind === 'audit' ? { migrations: AUDIT_MIGRATIONS, variable: 'AUDIT_DB' } : {};
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * The replaced mirror's lease and its last cursor, when it can be opened at
 * all: a damaged or missing file is what a restore is for, and then neither
 * can be had.
 */
function holdReplaced(target: string): Replaced {
  if (!existsSync(target)) return { cursor: null };
  let db: Db;
  try {
    db = openMirror(target);
  } catch {
    return { cursor: null };
  }
  try {
    const claim = acquireSyncLease(db);
    if (!claim.acquired)
      throw new RestoreRefused(`a sync holds ${target} (${claim.heldBy.holder}): wait for it to end, or stop it, then restore`, true);
    return { held: { db, lease: claim.lease }, cursor: lastCursor(db) };
  } catch (err) {
    db.close();
    throw err;
  }
}

/** The replaced mirror as the restore holds it until the install. */
interface Replaced {
  held?: { db: Db; lease: HeldLease };
  cursor: number | null;
}

/** Releases the replaced file's lease and connection; idempotent. */
function letGo(replaced: Replaced): void {
  if (replaced.held === undefined) return;
  replaced.held.lease.release();
  replaced.held.db.close();
  replaced.held = undefined;
}

/** Refuses a copy that is not a SQLite file of this kind, is newer than this build, or fails its check. */
function checkCopy(tmp: string, backup: string, kind: 'mirror' | 'audit'): void {
  let db: Db;
  try {
    db = new Database(tmp, { readonly: true });
    db.pragma('schema_version', { simple: true });
  } catch (err) {
    throw new RestoreRefused(`${backup}: not a SQLite database (${messageOf(err)})`);
  }
  try {
    const version = readVersion(db);
    const build = latestVersion(kind === 'audit' ? AUDIT_MIGRATIONS : MIGRATIONS);
    if (version > build) throw new RestoreRefused(`${backup}: ${new SchemaTooNewError(version, build).message}`);
    const missing = (kind === 'mirror' ? MIRROR_TABLES : AUDIT_TABLES).filter((t) => !hasTable(db, t));
    if (missing.length > 0) throw new RestoreRefused(`${backup}: not a user-mirror ${kind} (no ${missing.join(', ')} table)`);
    const check = db.pragma('quick_check', { simple: true });
    if (check !== 'ok') throw new RestoreRefused(`${backup}: fails its check (quick_check: ${String(check)})`);
  } catch (err) {
    if (err instanceof RestoreRefused) throw err;
    throw new RestoreRefused(`${backup}: cannot be checked (${messageOf(err)})`);
  } finally {
    db.close();
  }
}

/**
 * Puts `tmp` in `target`'s place, the old file kept aside as `keepAs`
 * (hard-linked first, so `target` is never missing). Its -wal goes with
 * it: left beside the new file, SQLite would apply it to the new file.
 */
function install(tmp: string, target: string, keepAs: string): string | null {
  let keptAs: string | null = null;
  if (existsSync(target)) {
    keptAs = keepAs;
    linkSync(target, keptAs);
    if (existsSync(`${target}-wal`)) renameSync(`${target}-wal`, `${keptAs}-wal`);
    rmSync(`${target}-shm`, { force: true });
  }
  renameSync(tmp, target);
  syncFile(dirname(target));
  return keptAs;
}

/**
 * Opens the installed file once for writing, as a sync does: SQLite makes
 * its -wal and -shm with the file's mode and the folder's group, and the
 * close leaves them (./wal-pair.ts). Without the pair a reader in
 * MIRROR_GROUP cannot open the file ("attempt to write a readonly
 * database": it may not create them in the folder) until the next sync.
 * The file is installed whatever happens here: a failure is returned, not thrown.
 */
function keepWalPair(kind: 'mirror' | 'audit', target: string): string | null {
  try {
    openMirror(target, { ...openOptions(kind), mustExist: true }).close();
    return null;
  } catch (err) {
    return messageOf(err);
  }
}

/** The tables that make a SQLite file a mirror, or an audit file (a backup of something else is refused). */
const MIRROR_TABLES = ['users', 'sync_runs', 'change_events', 'change_feed', 'history_state'];
const AUDIT_TABLES = ['member_removals'];

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
