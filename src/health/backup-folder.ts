/**
 * The folder of scheduled backups (BACKUP_DIR): what is in it, which copies
 * rotation drops, the attempt that fills it, and the record of the last
 * attempt that `status` and `/metrics` read. One attempt (backupIntoFolder,
 * which `user-mirror backup` alone and the daemon's schedule both run)
 * writes `mirror-<stamp>.db` and, when the audit file exists,
 * `audit-<stamp>.db`; `last-backup.json` says how the newest attempt ended
 * (a failure is kept until a later attempt succeeds), written so that a
 * full folder still takes the record of its own failure (RECORD_BYTES). It
 * is kept in the folder, not beside the mirror or in the daemon: `status`
 * reads it without a daemon (a system cron runs backups too), and beside the
 * mirror is the same full file system when both share one. The decisions
 * are pure; reading and writing the folder are the thin part.
 */
import {
  closeSync,
  existsSync,
  fsyncSync,
  ftruncateSync,
  openSync,
  readdirSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { backupDatabase, removeStalePartials, syncFile, type CopyFacts } from '../../db/backup.js';
import { diskSpace, FULL_BELOW_BYTES, fullDiskWords, isSpaceError } from '../../db/disk-space.js';
import { createPrivateFolder } from '../../db/file-modes.js';
import { intervalOfExpression } from './schedule-interval.js';
import { errorMessage } from '../runtime/line-text.js';
import { readRecordFile, type RecordRead } from '../runtime/record-file.js';

const LAST_BACKUP_FILE = 'last-backup.json';

/** `20261128T051500123Z`: sorts as text in time order, safe in every file system. */
export function backupStamp(at: Date): string {
  return at.toISOString().replace(/[-:.]/g, '');
}

/** The copy's name in the folder. */
export function backupName(kind: 'mirror' | 'audit', at: Date): string {
  return `${kind}-${backupStamp(at)}.db`;
}

const NAME = /^(mirror|audit)-(\d{8}T\d{9}Z)\.db$/;

/** Pure: of `names` in the folder, the copies of each kind beyond the newest `keep`, to delete. */
function rotationVictims(names: readonly string[], keep: number): string[] {
  const victims: string[] = [];
  for (const kind of ['mirror', 'audit']) {
    const mine = names.filter((n) => NAME.exec(n)?.[1] === kind).sort();
    victims.push(...mine.slice(0, Math.max(0, mine.length - keep)));
  }
  return victims;
}

const CopySchema = z.object({ path: z.string(), bytes: z.number().int().nonnegative() });

/** The record of the newest attempt: the file `status` reads, so it is validated like any input. */
const LastBackupSchema = z.object({
  at: z.iso.datetime(),
  ok: z.boolean(),
  error: z.string().optional(),
  mirror: CopySchema.optional(),
  audit: CopySchema.optional(),
  /** The last attempt that succeeded: kept across failures, so a failure still shows how old the last good copy is. */
  lastGood: z.object({ at: z.iso.datetime(), mirror: CopySchema }).optional(),
});
export type LastBackup = z.infer<typeof LastBackupSchema>;

/** The record in `dir`: undefined when there is none yet; a record that does not parse is a failure to report. */
export function readLastBackup(dir: string): RecordRead<LastBackup> {
  return readRecordFile(dir, LAST_BACKUP_FILE, LastBackupSchema);
}

/**
 * The record's one size: a page. A record is written padded to it, so a
 * later one fits in the blocks the file already has: on a full folder, where
 * a new file cannot be made, the record of the failure is written over the
 * last one in place (writeLastBackup). Without that, the record of the last
 * good copy stayed, and `status` said "last good 2s ago" until staleness.
 */
const RECORD_BYTES = 4_096;

/** A record as its page: JSON padded with spaces (JSON allows them) to RECORD_BYTES; longer records are not padded. */
function recordPage(record: LastBackup | undefined): Buffer {
  const text = record === undefined ? '' : JSON.stringify(record);
  const bytes = Buffer.byteLength(text);
  if (bytes >= RECORD_BYTES) return Buffer.from(`${text}\n`);
  const page = Buffer.alloc(RECORD_BYTES, ' ');
  page.write(text);
  page.write('\n', RECORD_BYTES - 1);
  return page;
}

/**
 * Writes the record privately and atomically (a reader never sees half of
 * it); where no new file can be made (a full folder), over the old record
 * in place, which needs no new block. Throws when neither can be done.
 */
function writeLastBackup(dir: string, record: LastBackup): void {
  writeRecordPage(dir, recordPage(record));
}

/**
 * Reserves the record's page before a first attempt (a blank page reads as
 * no record yet): then even the first attempt's failure on a folder that
 * fills during it can be recorded in place.
 */
function reserveLastBackup(dir: string): void {
  try {
    writeFileSync(join(dir, LAST_BACKUP_FILE), recordPage(undefined), { mode: 0o600, flag: 'wx' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
}

function writeRecordPage(dir: string, page: Buffer): void {
  const path = join(dir, LAST_BACKUP_FILE);
  const tmp = `${path}.${process.pid}`;
  try {
    writeFileSync(tmp, page, { mode: 0o600 });
    renameSync(tmp, path);
  } catch (err) {
    rmSync(tmp, { force: true });
    if (!writeInPlace(path, page)) throw err;
  }
  syncFile(dir);
}

/** The page written over `path` from its start, the rest cut off; false when that cannot be done either. */
function writeInPlace(path: string, page: Buffer): boolean {
  let fd: number;
  try {
    fd = openSync(path, 'r+');
  } catch {
    return false;
  }
  try {
    writeSync(fd, page, 0, page.length, 0);
    ftruncateSync(fd, page.length);
    fsyncSync(fd);
    return true;
  } catch {
    return false;
  } finally {
    closeSync(fd);
  }
}

/** Deletes what rotation drops; returns the names deleted. */
function rotate(dir: string, keep: number): string[] {
  const victims = rotationVictims(readdirSync(dir), keep);
  for (const name of victims) rmSync(join(dir, name), { force: true });
  return victims;
}

/**
 * One attempt: both files into `dir` (made private when it does not exist),
 * rotation, and the record of the attempt. Returns the record (never throws
 * for a failed copy: the failure is the record's).
 */
export function backupIntoFolder(dir: string, mirrorPath: string, auditPath: string, keep: number): LastBackup {
  const at = new Date();
  const previous = readLastBackup(dir);
  const lastGood = previous.ok ? (previous.record?.ok === true ? previous.record : previous.record?.lastGood) : undefined;
  let record: LastBackup;
  try {
    createPrivateFolder(dir);
    // A killed attempt's copy in the making is nobody's once its process is gone.
    for (const path of removeStalePartials(dir)) process.stderr.write(`removed ${path}: left by a backup that did not finish\n`);
    reserveLastBackup(dir);
    const mirror = backupDatabase(mirrorPath, join(dir, backupName('mirror', at)), 'mirror');
    const audit = existsSync(auditPath) ? backupDatabase(auditPath, join(dir, backupName('audit', at)), 'audit') : undefined;
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
      record = { ...record, ok: false, error: `copied, but ${join(dir, LAST_BACKUP_FILE)} cannot be written: ${errorMessage(err)}` };
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

function brief(c: CopyFacts): { path: string; bytes: number } {
  return { path: c.path, bytes: c.bytes };
}

/** What `status` and `/metrics` say of backups. */
export interface BackupVerdict {
  /** The last good copy's time and size, or null for none. */
  lastGoodAt: string | null;
  lastGoodBytes: number | null;
  /** The newest attempt failed (its error), or the record cannot be read. */
  failed: string | null;
  /** The last good copy is older than twice the schedule's interval (or there is none after two intervals of running). */
  stale: boolean;
  ageSeconds: number | null;
}

/** Pure: the verdict from the record, the schedule's interval and now. */
function backupVerdict(read: ReturnType<typeof readLastBackup>, intervalMs: number, now: Date, since: Date | undefined): BackupVerdict {
  if (!read.ok) return { lastGoodAt: null, lastGoodBytes: null, failed: read.problem, stale: true, ageSeconds: null };
  const record = read.record;
  const good = record?.ok === true && record.mirror !== undefined ? { at: record.at, mirror: record.mirror } : record?.lastGood;
  const ageMs = good === undefined ? undefined : now.getTime() - Date.parse(good.at);
  const reference = good === undefined ? since : undefined;
  const stale =
    ageMs !== undefined ? ageMs > 2 * intervalMs : reference !== undefined && now.getTime() - reference.getTime() > 2 * intervalMs;
  return {
    lastGoodAt: good?.at ?? null,
    lastGoodBytes: good?.mirror.bytes ?? null,
    failed: record !== undefined && !record.ok ? (record.error ?? 'failed') : null,
    stale,
    ageSeconds: ageMs === undefined ? null : Math.round(ageMs / 1000),
  };
}

/** When the folder was set up (its birth time, else its modification time): what a folder with no good copy yet is judged from. */
export function folderSince(dir: string): Date | undefined {
  try {
    const s = statSync(dir);
    return s.birthtime.getTime() > 0 ? s.birthtime : s.mtime;
  } catch {
    return undefined;
  }
}

/** The verdict on BACKUP_DIR now, for `status` and `/metrics`. */
export function currentBackupVerdict(dir: string, cron: string, now: Date = new Date()): BackupVerdict {
  return backupVerdict(readLastBackup(dir), intervalOfExpression(cron), now, folderSince(dir));
}
