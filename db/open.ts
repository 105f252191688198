/**
 * Opens the mirror database: WAL (readers never block the writer and always
 * see a committed snapshot), a busy timeout (a second process waits instead
 * of failing with SQLITE_BUSY), and the schema migrated to the latest version.
 *
 * A path that cannot be a mirror is a configuration error (MirrorDbError, a
 * ConfigError: commands exit 2 and pm2 does not restart): SQLite's own words
 * ("unable to open database file", "disk I/O error" for a directory) name
 * neither the variable nor the path. Anything but a regular file is refused
 * before SQLite sees it: SQLite would happily open /dev/null and then create
 * /dev/null-journal and /dev/null-wal beside it.
 */
import { mkdirSync, statSync, type Stats } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { ConfigError } from '../src/config.js';
import { migrate, type Migration } from './migrate.js';
import { MIGRATIONS } from './migrations/index.js';

export type Db = Database.Database;

export interface OpenOptions {
  /** Open without writing: no migration, no directory creation. For analytics and offline resolve. */
  readonly?: boolean;
  /** How long a write waits for another connection's write lock before SQLITE_BUSY. */
  busyTimeoutMs?: number;
  /** The schema to migrate to; the mirror's by default (the audit file has its own, db/audit-migrations). */
  migrations?: readonly Migration[];
  /** The variable that named the path, for error messages. */
  variable?: 'MIRROR_DB' | 'AUDIT_DB';
}

/** MIRROR_DB names something that cannot hold the mirror. */
export class MirrorDbError extends ConfigError {
  override name = 'MirrorDbError';
  constructor(
    readonly path: string,
    readonly problem: string,
    readonly variable = 'MIRROR_DB',
  ) {
    super([`${variable}=${path}: ${problem}`]);
  }
}

export const DEFAULT_BUSY_TIMEOUT_MS = 5_000;

const CANNOT_CREATE = 'cannot create the database (parent directory missing or not writable)';

/** SQLite's errors that mean "this path is not a mirror", in words that say so. */
function sqliteProblem(code: string | undefined, existed: boolean): string | undefined {
  if (code === 'SQLITE_NOTADB') return 'not a SQLite database';
  if (code === 'SQLITE_CANTOPEN') return existed ? 'cannot be opened (check its permissions and its directory\'s)' : CANNOT_CREATE;
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

export function openMirror(path: string, options: OpenOptions = {}): Db {
  const readonly = options.readonly ?? false;
  const variable = options.variable ?? 'MIRROR_DB';
  const existed = path !== ':memory:' && checkPath(path, readonly, variable);
  let db: Db | undefined;
  try {
    db = new Database(path, { readonly, fileMustExist: readonly });
    db.pragma(`busy_timeout = ${options.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS}`);
    // Opening reads nothing; reading the header here makes "not a database" an open error, not a later query's.
    db.pragma('schema_version', { simple: true });
    if (!readonly) {
      // For a new file only (a no-op once the file has pages): users rows are ~1 KB, so 4 KiB pages
      // hold three and spill `raw` to overflow pages. Measured, a first sync of 200k users writing
      // into one transaction: 16 KiB pages 25.6k users/s, 4 KiB 15.4k; the file 20% smaller.
      db.pragma('page_size = 16384');
      db.pragma('journal_mode = WAL');
      // NORMAL is durable across process crashes in WAL mode; only an OS crash can lose the last commit.
      db.pragma('synchronous = NORMAL');
      db.pragma('foreign_keys = ON');
      migrate(db, options.migrations ?? MIGRATIONS);
    }
    return db;
  } catch (err) {
    db?.close();
    const problem = path === ':memory:' ? undefined : sqliteProblem((err as { code?: string }).code, existed);
    throw problem === undefined ? err : new MirrorDbError(path, problem, variable);
  }
}

/**
 * Refuses what SQLite would misreport or misuse; creates the parent
 * directory of a new writable file. True if the file already existed.
 */
function checkPath(path: string, readonly: boolean, variable: string): boolean {
  const stats = statOrUndefined(path, variable);
  if (stats?.isDirectory()) throw new MirrorDbError(path, 'is a directory, not a database file', variable);
  if (stats !== undefined && !stats.isFile()) {
    throw new MirrorDbError(path, 'is not a regular file (a device, pipe or socket); the database needs a file of its own', variable);
  }
  if (stats !== undefined) return true;
  if (readonly) throw new MirrorDbError(path, 'no such file', variable);
  try {
    mkdirSync(dirname(path), { recursive: true });
  } catch (err) {
    throw new MirrorDbError(path, `${CANNOT_CREATE}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`, variable);
  }
  return false;
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
