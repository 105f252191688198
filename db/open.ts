/**
 * Opens the mirror database: WAL (readers never block the writer and always
 * see a committed snapshot), a busy timeout (a second process waits instead
 * of failing with SQLITE_BUSY), and the schema migrated to the latest version.
 *
 * A path that cannot be a mirror is a configuration error (MirrorDbError:
 * commands exit 2 and pm2 does not restart): SQLite's own words
 * ("unable to open database file", "disk I/O error" for a directory) name
 * neither the variable nor the path. Anything but a regular file is refused
 * before SQLite sees it: SQLite would happily open /dev/null and then create
 * /dev/null-journal and /dev/null-wal beside it.
 */
import { statSync, type Stats } from 'node:fs';
import Database from 'better-sqlite3';
import { createPrivateFile, octal, tightenDatabaseFiles, type Tightened } from './file-modes.js';
import { MIGRATIONS } from './migrations.js';
import { migrate, refuseNewerSchema, SchemaTooNewError, type Migration } from './migrate.js';
import { fullDiskCause, isSpaceError } from './disk-space.js';
import { keepWalPairOnClose, openWithoutShm } from './wal-pair.js';

export type Db = Database.Database;

export interface OpenOptions {
  /** Open without writing: no migration, no directory creation. For analytics and offline resolve. */
  readonly?: boolean;
  /** How long a write waits for another connection's write lock before SQLITE_BUSY. */
  busyTimeoutMs?: number;
  /** The schema to migrate to; the mirror's by default (the audit file has its own, db/open-audit.ts). */
  migrations?: readonly Migration[];
  /** The variable that named the path, for error messages. */
  variable?: 'MIRROR_DB' | 'AUDIT_DB';
  /**
   * Read the file's first GiB through a memory map (readers doing random
   * lookups: offline resolve, the replica). A lookup lands on random pages of
   * a file far larger than SQLite's cache; through the map it spares a
   * pread() and a copy per page. Measured, 50,000 random resolves over 200k
   * users: 4.5-5.8 µs a lookup mapped against 8.6-9.9 µs read, half of it
   * system time. Safe because the writer never shrinks the file (no VACUUM,
   * no auto_vacuum): a map of a shrunk file would fault.
   */
  mapped?: boolean;
  /**
   * Open for writing only a file that exists (the daemon's sync child: the
   * daemon made the mirror, so a missing one was deleted, not yet to make).
   */
  mustExist?: boolean;
  /**
   * A readonly open whose first read fails for want of space (a full disk
   * and no `-shm` to reuse) reads through db/wal-pair.ts openWithoutShm
   * instead. Only for commands that read briefly and exit: that read holds
   * the mirror's lock while open.
   */
  readWhenFull?: boolean;
  /**
   * Who checkpoints the WAL (MIRROR_CHECKPOINTS). `external`: a replicator
   * (Litestream) owns every checkpoint, so a writable connection never runs
   * one of its own, not even SQLite's automatic one on a commit.
   */
  checkpoints?: CheckpointMode;
}

/**
 * `after-sync`: the sync checkpoints once its run is out (checkpointMirror).
 * `external`: Litestream does; a checkpoint of ours that restarts or truncates
 * the WAL would make it lose its place and upload the whole mirror again.
 */
export type CheckpointMode = 'after-sync' | 'external';

/** A file narrowed at a writable open (db/file-modes.ts): one line on stderr. Readers never narrow: they may not own the files. */
function reportTightened(t: Tightened): void {
  process.stderr.write(`user-mirror: ${t.path} was mode ${octal(t.from)}, readable by other accounts: narrowed to ${octal(t.to)}\n`);
}

/**
 * Files given to MIRROR_GROUP at a writable open (a group set after the
 * mirror was made): one structured line on stderr, which pm2 and systemd
 * keep with the daemon's log (db/ has no logger).
 */
function reportWidened(files: Tightened[]): void {
  const line = {
    level: 30,
    time: Date.now(),
    event: 'db.files_widened_to_group',
    files: files.map((f) => ({ path: f.path, from: octal(f.from), to: octal(f.to) })),
    msg: 'MIRROR_GROUP: files and folder opened to the group (read; never to other accounts)',
  };
  process.stderr.write(`${JSON.stringify(line)}\n`);
}

/** How much of the file a mapped reader maps. */
const MAP_BYTES = 1024 * 1024 * 1024;

/**
 * MIRROR_DB (or AUDIT_DB) names something that cannot hold the database: a
 * configuration error, reported like one (`invalid configuration:` and the
 * variable; commands exit 2, pm2 does not restart).
 */
export class MirrorDbError extends Error {
  override name = 'MirrorDbError';
  readonly problems: readonly string[];
  constructor(
    readonly path: string,
    readonly problem: string,
    readonly variable = 'MIRROR_DB',
  ) {
    const line = `${variable}=${path}: ${problem}`;
    super(`invalid configuration:\n  - ${line}`);
    this.problems = [line];
  }
}

export const DEFAULT_BUSY_TIMEOUT_MS = 5_000;

const CANNOT_CREATE = 'cannot create the database (parent directory missing or not writable)';

/** SQLite's errors that mean "this path is not a mirror", in words that say so. */
function sqliteProblem(code: string | undefined, existed: boolean): string | undefined {
  if (code === 'SQLITE_NOTADB') return 'not a SQLite database';
  if (code === 'SQLITE_CANTOPEN') return existed ? "cannot be opened (check its permissions and its directory's)" : CANNOT_CREATE;
  return undefined;
}

/** What one WAL checkpoint did: `busy` when a reader or writer kept it from finishing (the rest waits for the next). */
export interface CheckpointResult {
  busy: boolean;
  /** WAL frames before, and frames copied into the file. */
  walFrames: number;
  copiedFrames: number;
  ms: number;
}

/**
 * Copies the WAL into the database file and truncates it. A sync's writer
 * does not checkpoint on its COMMIT (wal_autocheckpoint is off on its
 * connection, db/mirror-store.ts): on a first sync that copy is the size of
 * the mirror and took 5.7 s of a 1M-user run's 29 s, after the run was
 * already visible. The sync's callers run this once the run's result is out.
 */
export function checkpointMirror(db: Db): CheckpointResult {
  const started = performance.now();
  type Row = { busy: number; log: number; checkpointed: number };
  const none: Row = { busy: 0, log: 0, checkpointed: 0 };
  // PASSIVE copies and counts; TRUNCATE then empties the file (and reports zeros once it has).
  const copied = (db.pragma('wal_checkpoint(PASSIVE)') as Row[])[0] ?? none;
  const truncated = (db.pragma('wal_checkpoint(TRUNCATE)') as Row[])[0] ?? none;
  const ms = Math.round(performance.now() - started);
  return { busy: truncated.busy !== 0, walFrames: copied.log, copiedFrames: copied.checkpointed, ms };
}

/**
 * Copies what the WAL holds into the file without waiting on a reader
 * (PASSIVE) and without truncating it: what a failed or blocked checkpoint
 * left. `walFrames` 0: the WAL was empty.
 */
export function copyWalPassive(db: Db): Pick<CheckpointResult, 'walFrames' | 'copiedFrames'> | undefined {
  const r = (db.pragma('wal_checkpoint(PASSIVE)') as { log: number; checkpointed: number }[])[0];
  return r === undefined ? undefined : { walFrames: r.log, copiedFrames: r.checkpointed };
}

/** Bytes in pages the file holds free (a purge or a deletion freed them): later writes reuse them; the file never shrinks by itself. */
export function freePageBytes(db: Db): number {
  return (db.pragma('freelist_count', { simple: true }) as number) * (db.pragma('page_size', { simple: true }) as number);
}

/**
 * SQLite's own words for a disk or file failure ("database or disk is full",
 * "disk I/O error") name neither the file nor the folder; an operator with
 * several disks must know which filled. Returns an error naming `path`
 * (the original kept as its cause), or `err` itself when it is not such a
 * failure.
 */
export function withDatabasePath(err: unknown, path: string, variable = 'MIRROR_DB'): unknown {
  const code = (err as { code?: unknown } | null)?.code;
  if (!(err instanceof Error) || typeof code !== 'string' || !/^SQLITE_(FULL|IOERR|READONLY|CANTOPEN|CORRUPT|NOTADB|PERM)/.test(code))
    return err;
  if (err.message.includes(path)) return err;
  // A full disk in words (db/disk-space.ts), SQLite's kept after them: "disk I/O error" alone sends an operator to the hardware.
  const full = fullDiskCause(err, path, variable);
  const named = new Error(full === undefined ? `${path}: ${err.message} (${code})` : `${full} (${err.message}, ${code})`, { cause: err });
  named.name = err.name;
  return Object.assign(named, { code });
}

/** The database file's and its WAL's sizes (0 for a file that does not exist: no WAL after the last connection closed). */
export function databaseFileSizes(path: string): { mirrorBytes: number; walBytes: number } {
  const size = (p: string): number => {
    try {
      return statSync(p).size;
    } catch {
      return 0;
    }
  };
  return { mirrorBytes: size(path), walBytes: size(`${path}-wal`) };
}

export function openMirror(path: string, options: OpenOptions = {}): Db {
  const readonly = options.readonly ?? false;
  const variable = options.variable ?? 'MIRROR_DB';
  const existed = path !== ':memory:' && checkPath(path, readonly || options.mustExist === true, variable);
  if (existed && !readonly) narrowModes(path, variable, reportTightened);
  const busyTimeoutMs = options.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS;
  let db: Db | undefined;
  try {
    db = new Database(path, { readonly, fileMustExist: readonly || options.mustExist === true });
    db.pragma(`busy_timeout = ${busyTimeoutMs}`);
    try {
      // Opening reads nothing; reading the header here makes "not a database" an open error, not a later query's.
      db.pragma('schema_version', { simple: true });
    } catch (err) {
      if (!(readonly && options.readWhenFull === true && isSpaceError(err))) throw err;
      db.close();
      db = openWithoutShm(path, busyTimeoutMs);
    }
    if (options.mapped === true) db.pragma(`mmap_size = ${MAP_BYTES}`);
    refuseNewerSchema(db, options.migrations ?? MIGRATIONS);
    if (!readonly) {
      // For a new file only (a no-op once the file has pages): users rows are ~1 KB, so 4 KiB pages
      // hold three and spill `raw` to overflow pages. Measured, a first sync of 200k users writing
      // into one transaction: 16 KiB pages 25.6k users/s, 4 KiB 15.4k; the file 20% smaller.
      db.pragma('page_size = 16384');
      db.pragma('journal_mode = WAL');
      // NORMAL is durable across process crashes in WAL mode; only an OS crash can lose the last commit.
      db.pragma('synchronous = NORMAL');
      db.pragma('foreign_keys = ON');
      if (options.checkpoints === 'external') db.pragma('wal_autocheckpoint = 0');
      migrate(db, options.migrations ?? MIGRATIONS);
      if (path !== ':memory:') keepWalPairOnClose(db, path);
    }
    return db;
  } catch (err) {
    db?.close();
    const problem =
      path === ':memory:'
        ? undefined
        : err instanceof SchemaTooNewError
          ? err.message
          : sqliteProblem((err as { code?: string }).code, existed);
    if (problem !== undefined) throw new MirrorDbError(path, problem, variable);
    // Only a full disk is renamed here: other open failures keep SQLite's words, as callers expect them.
    throw path !== ':memory:' && fullDiskCause(err, path, variable) !== undefined ? withDatabasePath(err, path, variable) : err;
  }
}

/**
 * Refuses what SQLite would misreport or misuse; creates the parent
 * directory of a new writable file. True if the file already existed.
 */
function checkPath(path: string, mustExist: boolean, variable: string): boolean {
  const stats = statOrUndefined(path, variable);
  if (stats?.isDirectory()) throw new MirrorDbError(path, 'is a directory, not a database file', variable);
  if (stats !== undefined && !stats.isFile()) {
    throw new MirrorDbError(path, 'is not a regular file (a device, pipe or socket); the database needs a file of its own', variable);
  }
  if (stats !== undefined) return true;
  if (mustExist) throw new MirrorDbError(path, 'no such file', variable);
  try {
    createPrivateFile(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // Another process created the file between the stat and here (not a parent that is a file): theirs to have made private.
    if (code === 'EEXIST' && statOrUndefined(path, variable)?.isFile() === true) return true;
    throw new MirrorDbError(path, `${CANNOT_CREATE}: ${code ?? String(err)}`, variable);
  }
  return false;
}

/** Takes from an existing database (and its -wal, -shm) the permission bits the file policy does not grant. */
function narrowModes(path: string, variable: string, report: (t: Tightened) => void): void {
  try {
    const widened: Tightened[] = [];
    for (const t of tightenDatabaseFiles(path, undefined, widened)) report(t);
    if (widened.length > 0) reportWidened(widened);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? String(err);
    throw new MirrorDbError(path, `cannot narrow its permissions to this account's (${code}); is it owned by another account?`, variable);
  }
}

function statOrUndefined(path: string, variable: string): Stats | undefined {
  try {
    return statSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    // Permission denied on a parent, ENOTDIR (a file used as a directory): not a path a mirror can live at.
    throw new MirrorDbError(path, `cannot be read: ${(err as NodeJS.ErrnoException).code ?? String(err)}`, variable);
  }
}
