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
 * This file keeps the arguments, the holders, the leftovers and what is
 * said; steps 2 to 4 (the copy, its check, the mark, the WAL-aware install)
 * are db/restore.ts's, where SQLite is spoken.
 *
 * Exit codes: 0 restored, 1 the backup is refused or the install failed
 * (the mirror is left as it was), 2 usage or configuration error, 5 busy
 * (a process holds the mirror, or a sync holds its lease).
 */
import { existsSync, statSync } from 'node:fs';
import { z } from 'zod';
import { parseCommandArgs, UsageError } from './args.js';
import { readConfig } from '../runtime/config.js';
import { openHolders } from '../runtime/open-holders.js';
import { auditPathOf } from '../../db/audit-location.js';
import { installBackup, refuseIncompleteBackup, RestoreRefused, type InstalledBackup } from '../../db/restore.js';
import { backupStamp } from '../health/backup-folder.js';
import { holdersAdvice, removeDeadLeftovers, restoreFilesBeside, type Leftover, type ReplacedFiles } from '../health/restore-files.js';

const Args = z.object({
  audit: z.boolean().optional(),
  json: z.boolean().optional(),
  positionals: z.array(z.string().min(1, 'must not be empty')).length(1, 'takes one argument: the backup file'),
});

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
    // A refusal leaves the mirror untouched: 5 when a process or a sync holds it, 1 when the backup is unfit.
    if (!(err instanceof RestoreRefused)) throw err;
    process.stderr.write(`restore refused: ${err.message}\n`);
    return err.busy ? 5 : 1;
  }
}

export interface Restored extends Omit<InstalledBackup, 'walPairProblem'> {
  /** Copies killed restores left (restore-files.ts): removed when their pid no longer runs, kept when it does. */
  leftovers: { removed: Leftover[]; kept: Leftover[] };
  /** Every replaced file now kept beside the target (this one included); null for none. */
  replaced: ReplacedFiles | null;
}

/** The whole restore (see the file's doc; the storage steps are db/restore.ts's); throws RestoreRefused with the mirror untouched. */
function restoreFile(kind: 'mirror' | 'audit', backup: string, target: string, now: Date): Restored {
  refuseIncompleteBackup(backup);
  const holders = openHolders([target, `${target}-wal`, `${target}-shm`]);
  if (holders.length > 0) throw new RestoreRefused(holdersAdvice(target, holders), true);
  // Before anything of this restore's: a copy a killed restore left can take the room this one needs.
  const leftovers = removeDeadLeftovers(target);
  process.stderr.write(leftoverLines(leftovers));
  const paths = { copy: `${target}.restoring-${process.pid}`, keepAs: `${target}.replaced-${backupStamp(now)}` };
  const { walPairProblem, ...installed } = installBackup(kind, backup, target, paths, now);
  if (walPairProblem !== null)
    process.stderr.write(
      `restore: installed, but ${target}-wal and -shm could not be made (${walPairProblem}); the next sync makes them\n`,
    );
  return { ...installed, leftovers, replaced: restoreFilesBeside(target).replaced };
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
      `  ${r.replaced.count} replaced files are kept beside it (${mib(r.replaced.bytes)}, the oldest from ${r.replaced.oldest.at}): remove those no longer needed (docs/backup.md)`,
    );
  lines.push('  start the daemon again (pm2 start user-mirror); its next sync brings the mirror up to date');
  return lines.join('\n') + '\n';
}
