/**
 * The last sync attempt's outcome where the mirror could not record it in
 * itself, kept in a small file beside it (`<MIRROR_DB>-attempt.json`): an
 * attempt that could not even write its run row (a full disk, a file it
 * could not open), or a WAL checkpoint that failed after a run. `status`
 * reads it (offline, without Redis) and reports it until a later run
 * completes and checkpoints, which marks it `ok` with that checkpoint's
 * figures (the frames a reader held back from it). The daemon's failed sync
 * jobs say the same in Redis; this file is what `sync --once` under cron
 * leaves, and what a host without Redis access sees.
 *
 * The failure it records is usually a full disk, where a new file or a
 * larger one cannot be written. So the file is made once, before the first
 * run, at a fixed size (RECORD_BYTES: one page), and every record is written
 * over it in place, padded to that size: a write that needs no new block
 * succeeds on a full disk.
 *
 * A loss of the mirror file under the running daemon (deleted or replaced:
 * src/daemon/mirror-watch.ts) is recorded here too, and outlives what that
 * daemon and its sync children write after it (keptLoss): a sync child that
 * opened the old file before the loss can finish, checkpoint and record `ok`
 * after it, and must not clear it. Another process's outcome (a restarted
 * daemon's run, a `sync --once`) replaces it as any record.
 */
import { closeSync, openSync, readFileSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { z } from 'zod';
import { createPrivateFile } from '../../db/file-modes.js';
import type { LossKind } from '../../db/file-identity.js';

/** The file's one size: a page, written whole. */
const RECORD_BYTES = 4_096;

const AttemptRecordSchema = z.object({
  /** When it was written. */
  at: z.string(),
  /**
   * `ok`: the last run completed and its WAL is in the mirror (or nothing has
   * failed yet); `sync`: an attempt that left no run row; `checkpoint`: the WAL
   * could not be copied into the mirror after a run.
   */
  what: z.enum(['ok', 'sync', 'checkpoint']),
  reason: z.string(),
  pid: z.number().int(),
  host: z.string(),
  /** The last checkpoint after a run that completed: frames in the WAL, and those copied (the rest a reader held back). */
  checkpoint: z.object({ at: z.string(), walFrames: z.number().int(), copiedFrames: z.number().int() }).optional(),
  /** Set on a `sync` record of the mirror file lost under the running daemon (recordMirrorLoss): `status` reports it until a sync succeeds on the file now at MIRROR_DB. */
  lost: z.object({ what: z.enum(['deleted', 'replaced']) }).optional(),
});
export type AttemptRecord = z.infer<typeof AttemptRecordSchema>;
export type AttemptFailure = Exclude<AttemptRecord['what'], 'ok'>;

/** The record's file, beside the mirror (as SQLite keeps `-wal` and `-shm`). */
export function attemptRecordPath(mirrorPath: string): string {
  return `${mirrorPath}-attempt.json`;
}

/** Makes the file at its full size, if it is not there yet: call before a run, while there is room. */
export function reserveAttemptRecord(mirrorPath: string): void {
  const path = attemptRecordPath(mirrorPath);
  try {
    createPrivateFile(path);
  } catch (err) {
    if ((err as { code?: string }).code === 'EEXIST') return;
    throw err;
  }
  write(path, { what: 'ok', reason: '' });
}

/** Records a failure beside the mirror; throws when it cannot (the caller logs that). */
export function recordFailedAttempt(mirrorPath: string, what: AttemptFailure, reason: string, now = new Date()): void {
  reserveAttemptRecord(mirrorPath);
  write(attemptRecordPath(mirrorPath), { what, reason }, now);
}

/** Records that the mirror file was deleted or replaced under the running daemon (src/daemon/mirror-watch.ts); throws when it cannot. */
export function recordMirrorLoss(mirrorPath: string, what: LossKind, reason: string, now = new Date()): void {
  reserveAttemptRecord(mirrorPath);
  write(attemptRecordPath(mirrorPath), { what: 'sync', reason, lost: { what } }, now);
}

/**
 * A run completed and its checkpoint ran: nothing failed that the mirror
 * does not show. Keeps the checkpoint's figures, for `status`.
 */
export function recordCheckpoint(mirrorPath: string, figures: { walFrames: number; copiedFrames: number }, now = new Date()): void {
  reserveAttemptRecord(mirrorPath);
  write(attemptRecordPath(mirrorPath), { what: 'ok', reason: '', checkpoint: { at: now.toISOString(), ...figures } }, now);
}

/**
 * A run completed and its checkpoint is another process's (MIRROR_CHECKPOINTS=external):
 * nothing of ours failed, and no figures of ours describe the WAL any more.
 */
export function recordRunCheckpointedElsewhere(mirrorPath: string, now = new Date()): void {
  reserveAttemptRecord(mirrorPath);
  write(attemptRecordPath(mirrorPath), { what: 'ok', reason: '' }, now);
}

/** The record, if any; a file that is not one is reported as a failure, never ignored. */
export function readAttemptRecord(mirrorPath: string): AttemptRecord | undefined {
  return readRecordAt(attemptRecordPath(mirrorPath));
}

function readRecordAt(path: string): AttemptRecord | undefined {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as { code?: string }).code === 'ENOENT') return undefined;
    throw err;
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  const parsed = AttemptRecordSchema.safeParse(json);
  if (parsed.success) return parsed.data;
  return {
    at: new Date().toISOString(),
    what: 'sync',
    reason: `${path} is not a sync attempt record; remove it (the next sync writes a new one)`,
    pid: 0,
    host: '',
  };
}

/** Our parent as we started: a daemon's sync child (forked by it) keeps its daemon's pid here even once orphaned. */
const PARENT_PID = process.ppid;

/**
 * Whether the record is a loss of the mirror file that this process, or the
 * daemon that forked it, recorded: whatever it does after the loss ran on
 * the old file (the daemon refuses every sync once it has seen the loss), so
 * it leaves the loss in place. A record that cannot be read is no loss.
 */
function keptLoss(path: string): boolean {
  let r: AttemptRecord | undefined;
  try {
    r = readRecordAt(path);
  } catch {
    return false;
  }
  return r?.lost !== undefined && r.host === hostname() && (r.pid === process.pid || r.pid === PARENT_PID);
}

/** One page, in place: the record, cut to fit, padded with spaces (JSON allows them); never over a loss this process's daemon recorded (keptLoss). */
function write(path: string, r: Pick<AttemptRecord, 'what' | 'reason' | 'checkpoint' | 'lost'>, now = new Date()): void {
  if (keptLoss(path)) return;
  const record: AttemptRecord = { at: now.toISOString(), pid: process.pid, host: hostname(), ...r };
  let text = JSON.stringify(record);
  for (let keep = record.reason.length; Buffer.byteLength(text) > RECORD_BYTES - 1;) {
    keep -= Buffer.byteLength(text) - (RECORD_BYTES - 1);
    text = JSON.stringify({ ...record, reason: `${record.reason.slice(0, Math.max(0, keep - 1))}…` });
  }
  const page = Buffer.alloc(RECORD_BYTES, ' ');
  page.write(text);
  page.write('\n', RECORD_BYTES - 1);
  const fd = openSync(path, 'r+');
  try {
    writeSync(fd, page, 0, RECORD_BYTES, 0);
  } finally {
    closeSync(fd);
  }
}

/** For /metrics: the last checkpoint's figures and whether the newest record is a failed one; undefined when none is known. */
export function checkpointFigures(mirrorPath: string): { walFrames: number; copiedFrames: number; failed: boolean } | undefined {
  let record: AttemptRecord | undefined;
  try {
    record = readAttemptRecord(mirrorPath);
  } catch {
    return undefined;
  }
  if (record === undefined) return undefined;
  const failed = record.what === 'checkpoint';
  if (record.checkpoint === undefined) return failed ? { walFrames: 0, copiedFrames: 0, failed } : undefined;
  return { walFrames: record.checkpoint.walFrames, copiedFrames: record.checkpoint.copiedFrames, failed };
}

/** For /metrics: the last attempt that left no run row, in the shape of a failed sync job (status-report's lastFailedAttempt weighs it against the newest run). */
export function attemptWithoutRun(mirrorPath: string): { finishedAt: string; failedReason: string } | undefined {
  const record = readAttemptRecord(mirrorPath);
  return record?.what === 'sync' ? { finishedAt: record.at, failedReason: record.reason } : undefined;
}
