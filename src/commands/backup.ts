/**
 * `user-mirror backup [<dest>] [--audit] [--json]`
 *
 * A consistent online copy of the mirror (or, with --audit, the removal
 * audit), taken while the daemon syncs and serves (db/backup.ts: one read
 * snapshot, no writer blocked), private whatever the umask, checked before
 * it is reported good, and renamed into place only then.
 *
 * - `backup <dest>`: one copy to `dest` (a new file, or into a folder as
 *   `mirror-<stamp>.db`).
 * - `backup` alone: the scheduled form, for a system cron where no daemon
 *   runs (src/health/backup-folder.ts `backupIntoFolder`, which the daemon
 *   runs on BACKUP_CRON in its own child, src/daemon/backup-main.ts): the
 *   mirror and the audit into BACKUP_DIR, rotation to BACKUP_KEEP copies of
 *   each, and `last-backup.json`, which `status` and `/metrics` read,
 *   written whether the attempt succeeded or not.
 *
 * Exit codes: 0 copied, 1 the copy failed (the reason printed; nothing is
 * left under the destination's name), 2 usage or configuration error.
 */
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { parseCommandArgs, UsageError } from './args.js';
import { readConfig } from '../runtime/config.js';
import { backupDatabase, type CopyFacts } from '../../db/backup.js';
import { auditPathOf } from '../../db/audit-location.js';
import { backupIntoFolder, backupName } from '../health/backup-folder.js';

const Args = z.object({
  audit: z.boolean().optional(),
  json: z.boolean().optional(),
  positionals: z.array(z.string().min(1, 'must not be empty')).max(1, 'takes at most one destination'),
});

export default async function backup(argv: string[]): Promise<number> {
  const args = parseCommandArgs(argv, { audit: { type: 'boolean' }, json: { type: 'boolean' } }, Args);
  const config = readConfig(['MIRROR_DB', 'AUDIT_DB', 'BACKUP_DIR', 'BACKUP_KEEP']);
  const auditPath = auditPathOf(config).path;
  const dest = args.positionals[0];
  const print = (facts: object, text: string) => process.stdout.write(args.json === true ? JSON.stringify(facts) + '\n' : text);
  if (dest !== undefined) {
    const kind = args.audit === true ? 'audit' : 'mirror';
    const facts = backupDatabase(kind === 'audit' ? auditPath : config.MIRROR_DB, destinationFile(dest, kind), kind);
    print(facts, describe(kind, facts));
    return 0;
  }
  if (args.audit === true)
    throw new UsageError('--audit takes a destination: backup <dest> --audit (without one, BACKUP_DIR gets both files)');
  if (config.BACKUP_DIR === undefined)
    throw new UsageError('give a destination (backup <dest>), or set BACKUP_DIR for the scheduled form (backup alone)');
  const record = backupIntoFolder(config.BACKUP_DIR, config.MIRROR_DB, auditPath, config.BACKUP_KEEP);
  if (!record.ok) {
    process.stderr.write(`backup failed: ${record.error ?? 'unknown'}\n`);
    if (args.json === true) process.stdout.write(JSON.stringify(record) + '\n');
    return 1;
  }
  print(record, [record.mirror, record.audit].flatMap((c) => (c === undefined ? [] : [`${c.path}  ${mib(c.bytes)}\n`])).join(''));
  return 0;
}

/** `dest` as a file to create: a folder gets a stamped name inside; an existing file is refused, never overwritten. */
function destinationFile(dest: string, kind: 'mirror' | 'audit'): string {
  if (existsSync(dest) && statSync(dest).isDirectory()) return join(dest, backupName(kind, new Date()));
  if (existsSync(dest)) throw new UsageError(`${dest} exists: a backup never overwrites a file; give a new name or a folder`);
  return dest;
}

function mib(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

function describe(kind: 'mirror' | 'audit', f: CopyFacts): string {
  const lines = [`${kind} backup: ${f.path}`, `  size: ${mib(f.bytes)} (${f.bytes} bytes), schema version ${f.schemaVersion}`];
  if (f.mark !== undefined) {
    lines.push(`  last published run: ${f.mark.backupRunId ?? 'none'}${f.historyLatest === null ? '' : ` (${f.historyLatest})`}`);
    lines.push(`  history: complete since ${f.historySince ?? 'not yet'}; change feed through cursor ${f.mark.backupCursor}`);
    lines.push(`  active users: ${f.users ?? 0}`);
  }
  lines.push(`  copied in ${f.copyMs} ms, checked (quick_check) in ${f.checkMs} ms`);
  return lines.join('\n') + '\n';
}
