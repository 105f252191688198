/**
 * The folder of scheduled backups (BACKUP_DIR): what is in it, which copies
 * rotation drops, and the record of the last attempt that `status` and
 * `/metrics` read. One attempt writes `mirror-<stamp>.db` and, when the
 * audit file exists, `audit-<stamp>.db`; `last-backup.json` says how the
 * newest attempt ended (a failure is kept until a later attempt succeeds).
 * The decisions are pure; reading and writing the folder are the thin part.
 */
import { readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { syncFile } from '../../db/backup.js';
import { intervalOfExpression } from './schedule.js';
import { readRecordFile, type RecordRead } from '../runtime/record-file.js';

export const LAST_BACKUP_FILE = 'last-backup.json';

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
export function rotationVictims(names: readonly string[], keep: number): string[] {
  const victims: string[] = [];
  for (const kind of ['mirror', 'audit']) {
    const mine = names.filter((n) => NAME.exec(n)?.[1] === kind).sort();
    victims.push(...mine.slice(0, Math.max(0, mine.length - keep)));
  }
  return victims;
}

const CopySchema = z.object({ path: z.string(), bytes: z.number().int().nonnegative() });

/** The record of the newest attempt: the file `status` reads, so it is validated like any input. */
export const LastBackupSchema = z.object({
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

/** Writes the record privately and atomically (a reader never sees half of it). */
export function writeLastBackup(dir: string, record: LastBackup): void {
  const path = join(dir, LAST_BACKUP_FILE);
  const tmp = `${path}.${process.pid}`;
  writeFileSync(tmp, JSON.stringify(record) + '\n', { mode: 0o600 });
  renameSync(tmp, path);
  syncFile(dir);
}

/** Deletes what rotation drops; returns the names deleted. */
export function rotate(dir: string, keep: number): string[] {
  const victims = rotationVictims(readdirSync(dir), keep);
  for (const name of victims) rmSync(join(dir, name), { force: true });
  return victims;
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
export function backupVerdict(
  read: ReturnType<typeof readLastBackup>,
  intervalMs: number,
  now: Date,
  since: Date | undefined,
): BackupVerdict {
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

/** The folder's modification time: when it was set up, for a folder with no good copy yet. */
function folderSince(dir: string): Date | undefined {
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
