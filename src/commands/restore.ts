/**
 * `user-mirror restore <backup> [--audit] [--json]`
 *
 * Installs a backup (`user-mirror backup`, `sqlite3 .backup`, a
 * `litestream restore` output) as MIRROR_DB (or, with --audit, AUDIT_DB):
 *
 * 1. refuses while any process on this host holds the file open (the
 *    daemon, `serve`, a sync, a `sqlite3` shell, Litestream) or a sync on
 *    another host holds the lease, naming what to stop; removes the copies
 *    killed restores left (`<target>.restoring-<pid>` whose pid no longer
 *    runs; src/health/restore-files.ts) and says so;
 * 2. refuses a file that is not a mirror, is newer than this build's schema,
 *    or fails its check; the check runs on a private copy beside the
 *    mirror, never on the backup, which stays as it was;
 * 3. marks the copy restored (db/restore.ts): a new feed epoch, cursors
 *    above any the lost file issued, a `mirror.restored` event, and a
 *    history gap from the backup to the next publish;
 * 4. keeps the replaced file aside (`<MIRROR_DB>.replaced-<stamp>`, with its
 *    -wal) and renames the copy into place: a reader sees the old file or
 *    the new one, never half of either; then opens it once, as a sync does,
 *    so its -wal and -shm are there with the file's modes and group (a
 *    reader in MIRROR_GROUP reads at once).
 *
 * Exit codes: 0 restored, 1 the backup is refused or the install failed
 * (the mirror is left as it was), 2 usage or configuration error, 5 busy
 * (a process holds the mirror, or a sync holds its lease).
 */
import { copyFileSync, existsSync, linkSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { z } from 'zod';
import { parseCommandArgs, UsageError } from './args.js';
import { readConfig } from '../runtime/config.js';
import { errorMessage } from '../runtime/errors.js';
import { openHolders } from '../runtime/open-holders.js';
import { syncFile } from '../../db/backup.js';
import { auditPathOf } from '../../db/audit-location.js';
import { createPrivateFile } from '../../db/file-modes.js';
import { lastCursor, type RestoreMark } from '../../db/lineage.js';
import { latestVersion, readVersion, SchemaTooNewError } from '../../db/migrate.js';
import { MIGRATIONS } from '../../db/migrations.js';
import { checkpointMirror, openMirror, type Db } from '../../db/open.js';
import { AUDIT_MIGRATIONS } from '../../db/open-audit.js';
import { markRestore, missingMirrorTables } from '../../db/restore.js';
import { acquireSyncLease, type HeldLease } from '../../db/sync-lease.js';
import { backupStamp } from '../health/backup-folder.js';
import { holdersAdvice, removeDeadLeftovers, restoreFilesBeside, type Leftover, type ReplacedFiles } from '../health/restore-files.js';

const Args = z.object({
  audit: z.boolean().optional(),
  json: z.boolean().optional(),
  positionals: z.array(z.string().min(1, 'must not be empty')).length(1, 'takes one argument: the backup file'),
});

/** A refusal: said on stderr with its exit code, the mirror untouched. */
class Refused extends Error {
  constructor(
    message: string,
    readonly code: 1 | 5,
  ) {
    super(message);
  }
}

export default async function restore(argv: string[]): Promise<number> {
  const args = parseCommandArgs(argv, { audit: { type: 'boolean' }, json: { type: 'boolean' } }, Args);
  const config = readConfig(['MIRROR_DB', 'AUDIT_DB']);
  const kind = args.audit === true ? 'audit' : 'mirror';
  const target = kind === 'audit' ? auditPathOf(config).path : config.MIRROR_DB;
  const backup = args.positionals[0] ?? '';
  if (!existsSync(backup) || !statSync(backup).isFile()) throw new UsageError(`${backup}: no such file (give the backup to restore)`);
  try {
    const done = restoreFile(kind, backup, target, new Date());
    process.stdout.write(args.json === true ? JSON.stringify(done) + '\n' : describe(kind, done));
    return 0;
  } catch (err) {
    if (!(err instanceof Refused)) throw err;
    process.stderr.write(`restore refused: ${err.message}\n`);
    return err.code;
  }
}

export interface Restored {
  installed: string;
  from: string;
  replacedKeptAs: string | null;
  schemaVersion: number;
  restore: RestoreMark | null;
  /** Copies killed restores left (restore-files.ts): removed when their pid no longer runs, kept when it does. */
  leftovers: { removed: Leftover[]; kept: Leftover[] };
  /** Every replaced file now kept beside the target (this one included); null for none. */
  replaced: ReplacedFiles | null;
}

/** The whole restore (see the file's doc); throws Refused with the mirror untouched. */
export function restoreFile(kind: 'mirror' | 'audit', backup: string, target: string, now: Date): Restored {
  if (existsSync(`${backup}-wal`) && statSync(`${backup}-wal`).size > 0)
    throw new Refused(
      `${backup} has a -wal beside it: it is not a complete copy on its own (open it once with sqlite3 to fold the WAL in)`,
      1,
    );
  const holders = openHolders([target, `${target}-wal`, `${target}-shm`]);
  if (holders.length > 0) throw new Refused(holdersAdvice(target, holders), 5);
  // Before anything of this restore's: a copy a killed restore left can take the room this one needs.
  const leftovers = removeDeadLeftovers(target);
  process.stderr.write(leftoverLines(leftovers));
  const tmp = `${target}.restoring-${process.pid}`;
  let replaced: Replaced = { cursor: null };
  try {
    rmSync(tmp, { force: true });
    createPrivateFile(tmp);
    copyFileSync(backup, tmp);
    checkCopy(tmp, backup, kind);
    // Only a good backup gets as far as the mirror: a refused one leaves it untouched, byte for byte.
    if (kind === 'mirror') replaced = holdReplaced(target);
    const db = openMirror(tmp, kind === 'audit' ? { migrations: AUDIT_MIGRATIONS, variable: 'AUDIT_DB' } : {});
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
    const keptAs = install(tmp, target, now);
    keepWalPair(kind, target);
    return {
      installed: target,
      from: backup,
      replacedKeptAs: keptAs,
      schemaVersion,
      restore: mark,
      leftovers,
      replaced: restoreFilesBeside(target).replaced,
    };
  } finally {
    letGo(replaced);
    for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(`${tmp}${suffix}`, { force: true });
  }
}

/**
 * The replaced mirror's lease (no sync may start in it meanwhile, on any
 * host) and its last cursor, when it can be opened at all: a damaged or
 * missing file is what a restore is for, and then neither can be had.
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
      throw new Refused(`a sync holds ${target} (${claim.heldBy.holder}): wait for it to end, or stop it, then restore`, 5);
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
    throw new Refused(`${backup}: not a SQLite database (${errorMessage(err)})`, 1);
  }
  try {
    const version = readVersion(db);
    const build = latestVersion(kind === 'audit' ? AUDIT_MIGRATIONS : MIGRATIONS);
    if (version > build) throw new Refused(`${backup}: ${new SchemaTooNewError(version, build).message}`, 1);
    const missing = kind === 'mirror' ? missingMirrorTables(db) : hasTable(db, 'member_removals') ? [] : ['member_removals'];
    if (missing.length > 0) throw new Refused(`${backup}: not a user-mirror ${kind} (no ${missing.join(', ')} table)`, 1);
    const check = db.pragma('quick_check', { simple: true });
    if (check !== 'ok') throw new Refused(`${backup}: fails its check (quick_check: ${String(check)})`, 1);
  } catch (err) {
    if (err instanceof Refused) throw err;
    throw new Refused(`${backup}: cannot be checked (${errorMessage(err)})`, 1);
  } finally {
    db.close();
  }
}

function hasTable(db: Db, name: string): boolean {
  return db.prepare(`SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?`).get(name) !== undefined;
}

/**
 * Puts `tmp` in `target`'s place, the old file kept aside under a stamped
 * name (hard-linked first, so `target` is never missing). Its -wal goes
 * with it: left beside the new file, SQLite would apply it to the new file.
 */
function install(tmp: string, target: string, now: Date): string | null {
  let keptAs: string | null = null;
  if (existsSync(target)) {
    keptAs = `${target}.replaced-${backupStamp(now)}`;
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
 * close leaves them (db/wal-pair.ts). Without the pair a reader in
 * MIRROR_GROUP cannot open the file ("attempt to write a readonly
 * database": it may not create them in the folder) until the next sync.
 * The file is installed whatever happens here: a failure is said, not thrown.
 */
function keepWalPair(kind: 'mirror' | 'audit', target: string): void {
  try {
    openMirror(
      target,
      kind === 'audit' ? { migrations: AUDIT_MIGRATIONS, variable: 'AUDIT_DB', mustExist: true } : { mustExist: true },
    ).close();
  } catch (err) {
    process.stderr.write(
      `restore: installed, but ${target}-wal and -shm could not be made (${errorMessage(err)}); the next sync makes them\n`,
    );
  }
}

/** What became of the copies earlier restores left: each said, removed or kept. */
function leftoverLines(l: Restored['leftovers']): string {
  const removed = l.removed.map(
    (x) => `restore: removed ${x.path} (${mib(x.bytes)}), left by restore pid ${x.pid}, which no longer runs (killed before its end)\n`,
  );
  const kept = l.kept.map(
    (x) =>
      `restore: kept ${x.path} (${mib(x.bytes)}): pid ${x.pid} runs (a restore under way, or the pid reused); never removed while it does\n`,
  );
  return [...removed, ...kept].join('');
}

function mib(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

function describe(kind: 'mirror' | 'audit', r: Restored): string {
  const lines = [`restored ${kind}: ${r.installed} from ${r.from} (schema version ${r.schemaVersion})`];
  lines.push(r.replacedKeptAs === null ? '  no file was replaced' : `  the replaced file is kept as ${r.replacedKeptAs}`);
  if (r.restore !== null) {
    lines.push(`  backup taken ${r.restore.backupAt}; its change feed ends at cursor ${r.restore.backupCursor}`);
    lines.push(
      `  new events start after cursor ${r.restore.cursorBase} with a mirror.restored event; a consumer past ${r.restore.backupCursor} is told to resume there`,
    );
    lines.push(`  history from ${r.restore.backupAt} to the next sync is a gap: --as-of answers "unknown" there`);
  }
  if (r.replaced !== null && r.replaced.count > 1)
    lines.push(
      `  ${r.replaced.count} replaced files are kept beside it (${mib(r.replaced.bytes)}, the oldest from ${r.replaced.oldest.at}): remove those no longer needed (docs/operations.md#backup-and-restore)`,
    );
  lines.push('  start the daemon again (pm2 start user-mirror); its next sync brings the mirror up to date');
  return lines.join('\n') + '\n';
}
