/**
 * The scheduled export (EXPORT_DIR, EXPORT_CRON, EXPORT_KEEP): each attempt
 * continues from the newest export in the folder (incremental; the first is
 * full, and so is one after the mirror's feed was rebuilt or restored,
 * which an incremental export refuses), rotates the folder, and writes
 * `last-export.json`, whether it succeeded or not, which `status` and
 * `/metrics` read. A failure keeps the last good export's facts, so a
 * failing schedule still shows how old the last good export is.
 */
import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { errorMessage } from '../runtime/line-text.js';
import { readRecordFile, type RecordRead } from '../runtime/record-file.js';
import { ExportRefused } from './plan.js';
import { exportMirror, latestManifest, type ExportOptions, type ExportResult } from './run.js';
import { syncFile } from '../../db/backup.js';

const LAST_EXPORT_FILE = 'last-export.json';

const GoodSchema = z.object({
  at: z.iso.datetime(),
  dir: z.string(),
  rows: z.number().int().nonnegative(),
  bytes: z.number().int().nonnegative(),
});

const LastExportSchema = z.object({
  at: z.iso.datetime(),
  ok: z.boolean(),
  error: z.string().optional(),
  kind: z.enum(['full', 'incremental', 'as-of']).optional(),
  dir: z.string().optional(),
  rows: z.number().int().nonnegative().optional(),
  bytes: z.number().int().nonnegative().optional(),
  /** Why an incremental attempt became a full one. */
  fullBecause: z.string().optional(),
  lastGood: GoodSchema.optional(),
});
export type LastExport = z.infer<typeof LastExportSchema>;

export function readLastExport(dir: string): RecordRead<LastExport> {
  return readRecordFile(dir, LAST_EXPORT_FILE, LastExportSchema);
}

function writeLastExport(dir: string, record: LastExport): void {
  const path = join(dir, LAST_EXPORT_FILE);
  const tmp = `${path}.${process.pid}`;
  writeFileSync(tmp, JSON.stringify(record) + '\n', { mode: 0o600 });
  renameSync(tmp, path);
  syncFile(dir);
}

/** Pure: the record of an attempt, from its result or its error and the previous record. */
export function recordOf(
  at: string,
  outcome: { result: ExportResult; fullBecause?: string } | { error: unknown },
  previous: LastExport | undefined,
): LastExport {
  if ('result' in outcome) {
    const m = outcome.result.manifest;
    return {
      at,
      ok: true,
      kind: m.kind,
      dir: outcome.result.dir,
      rows: m.files.reduce((n, f) => n + f.rows, 0),
      bytes: m.files.reduce((n, f) => n + f.bytes, 0),
      ...(outcome.fullBecause === undefined ? {} : { fullBecause: outcome.fullBecause }),
    };
  }
  const good =
    previous?.ok === true && previous.dir !== undefined
      ? { at: previous.at, dir: previous.dir, rows: previous.rows ?? 0, bytes: previous.bytes ?? 0 }
      : previous?.lastGood;
  return { at, ok: false, error: errorMessage(outcome.error, 500), ...(good === undefined ? {} : { lastGood: good }) };
}

/** One scheduled attempt into `dir`; never throws for a failed export (the record says so). */
export async function exportIntoFolder(
  dir: string,
  mirrorPath: string,
  keep: number,
  extra: Pick<ExportOptions, 'policy' | 'now'> = {},
): Promise<LastExport> {
  const at = (extra.now ?? (() => new Date()))().toISOString();
  const previous = readLastExport(dir);
  let record: LastExport;
  try {
    const base: ExportOptions = { mirrorPath, outDir: dir, keep, ...extra };
    let fullBecause: string | undefined;
    let result: ExportResult;
    try {
      result = await exportMirror({ ...base, incremental: true });
    } catch (err) {
      // A feed rebuilt or restored under the last export: start the chain again with a full export.
      if (!(err instanceof ExportRefused) || latestManifest(dir) === undefined) throw err;
      fullBecause = err.message;
      result = await exportMirror(base);
    }
    record = recordOf(at, { result, ...(fullBecause === undefined ? {} : { fullBecause }) }, undefined);
  } catch (err) {
    record = recordOf(at, { error: err }, previous.ok ? previous.record : undefined);
  }
  try {
    writeLastExport(dir, record);
  } catch (err) {
    if (record.ok)
      record = { ...record, ok: false, error: `exported, but ${join(dir, LAST_EXPORT_FILE)} cannot be written: ${errorMessage(err)}` };
  }
  return record;
}

/** What `status` and `/metrics` say of scheduled exports. */
export interface ExportVerdict {
  lastGoodAt: string | null;
  lastGoodRows: number | null;
  lastGoodBytes: number | null;
  /** The newest attempt failed (its error), or the record cannot be read. */
  failed: string | null;
  /** The last good export is older than twice the schedule's interval (or there is none after two intervals). */
  stale: boolean;
}

/** Pure: the verdict from the record, the schedule's interval, now, and since when the folder exists. */
export function exportVerdict(
  read: ReturnType<typeof readLastExport>,
  intervalMs: number,
  now: Date,
  since: Date | undefined,
): ExportVerdict {
  if (!read.ok) return { lastGoodAt: null, lastGoodRows: null, lastGoodBytes: null, failed: read.problem, stale: true };
  const record = read.record;
  const good =
    record?.ok === true && record.dir !== undefined
      ? { at: record.at, rows: record.rows ?? 0, bytes: record.bytes ?? 0 }
      : record?.lastGood;
  const reference = good === undefined ? since : new Date(good.at);
  return {
    lastGoodAt: good?.at ?? null,
    lastGoodRows: good?.rows ?? null,
    lastGoodBytes: good?.bytes ?? null,
    failed: record !== undefined && !record.ok ? (record.error ?? 'failed') : null,
    stale: reference !== undefined && now.getTime() - reference.getTime() > 2 * intervalMs,
  };
}
