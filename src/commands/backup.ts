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
 * - `backup` alone: the scheduled form (the daemon runs it on BACKUP_CRON;
 *   a system cron may too): the mirror and the audit into BACKUP_DIR,
 *   rotation to BACKUP_KEEP copies of each, and `last-backup.json`, which
 *   `status` and `/metrics` read, written whether the attempt succeeded or
 *   not.
 *
 * Exit codes: 0 copied, 1 the copy failed (the reason printed; nothing is
 * left under the destination's name), 2 usage or configuration error.
 */
import { existsSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { parseCommandArgs, UsageError } from './args.js';
import { readConfig } from '../runtime/config.js';
import { errorMessage } from '../runtime/errors.js';
import { copyDatabase, removeStalePartials, type CopyFacts } from '../../db/backup.js';
import { auditPathOf } from '../../db/audit-location.js';
import { createPrivateFile } from '../../db/file-modes.js';
import { openMirror } from '../../db/open.js';
import { AUDIT_MIGRATIONS } from '../../db/open-audit.js';
import {
  backupName,
  LAST_BACKUP_FILE,
  readLastBackup,
  reserveLastBackup,
  rotate,
  writeLastBackup,
  type LastBackup,
} from '../daemon/backup-folder.js';
import { diskSpace, FULL_BELOW_BYTES, fullDiskWords, isSpaceError } from '../../db/disk-space.js';

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
    const facts = copyOne(kind, kind === 'audit' ? auditPath : config.MIRROR_DB, destinationFile(dest, kind));
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

function copyOne(kind: 'mirror' | 'audit', source: string, dest: string): CopyFacts {
  const db = openMirror(source, {
    readonly: true,
    variable: kind === 'audit' ? 'AUDIT_DB' : 'MIRROR_DB',
    ...(kind === 'audit' ? { migrations: AUDIT_MIGRATIONS } : {}),
  });
  try {
    return copyDatabase(db, dest, kind);
  } finally {
    db.close();
  }
}

/**
 * The scheduled form: both files into `dir`, rotation, and the record of
 * the attempt. Returns the record (never throws for a failed copy: the
 * failure is the record's).
 */
export function backupIntoFolder(dir: string, mirrorPath: string, auditPath: string, keep: number): LastBackup {
  const at = new Date();
  const previous = readLastBackup(dir);
  const lastGood = previous.ok ? (previous.record?.ok === true ? previous.record : previous.record?.lastGood) : undefined;
  let record: LastBackup;
  try {
    ensureFolder(dir);
    // A killed attempt's copy in the making is nobody's once its process is gone.
    for (const path of removeStalePartials(dir)) process.stderr.write(`removed ${path}: left by a backup that did not finish\n`);
    reserveLastBackup(dir);
    const mirror = copyOne('mirror', mirrorPath, join(dir, backupName('mirror', at)));
    const audit = existsSync(auditPath) ? copyOne('audit', auditPath, join(dir, backupName('audit', at))) : undefined;
    rotate(dir, keep);
    record = { at: at.toISOString(), ok: true, mirror: brief(mirror), ...(audit === undefined ? {} : { audit: brief(audit) }) };
  } catch (err) {
    const good = lastGood?.mirror === undefined ? undefined : { at: lastGood.at, mirror: lastGood.mirror };
    record = { at: at.toISOString(), ok: false, error: whyFailed(err, dir), ...(good === undefined ? {} : { lastGood: good }) };
  }
  try {
    writeLastBackup(dir, record);
  } catch (err) {
    if (record.ok)
      record = { ...record, ok: false, error: `copied, but ${join(dir, 'last-backup.json')} cannot be written: ${errorMessage(err)}` };
  }
  return record;
}

/** The error, led by the full file system's words when BACKUP_DIR's has no room (the likely cause of a copy failing there). */
function whyFailed(err: unknown, dir: string): string {
  const message = errorMessage(err, 500);
  const space = diskSpace(join(dir, LAST_BACKUP_FILE));
  const noRoom = isSpaceError(err) || (err as NodeJS.ErrnoException | null)?.code === 'ENOSPC';
  return noRoom && space !== undefined && space.freeBytes < FULL_BELOW_BYTES
    ? `${fullDiskWords(dir, space.freeBytes, 'BACKUP_DIR')}: ${message}`
    : message;
}

/** BACKUP_DIR made private like the mirror's folder (the file policy's mode) when it does not exist. */
function ensureFolder(dir: string): void {
  if (existsSync(dir)) return;
  // createPrivateFile makes the folders up to a file with the policy's mode; the probe file itself is not kept.
  const probe = join(dir, `.created-${process.pid}`);
  createPrivateFile(probe);
  rmSync(probe, { force: true });
}

function brief(c: CopyFacts): { path: string; bytes: number } {
  return { path: c.path, bytes: c.bytes };
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
