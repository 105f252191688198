/**
 * Scheduled exports for a lake: on EXPORT_CRON (UTC), the daemon runs
 * `user-mirror export` (the scheduled form into EXPORT_DIR: incremental from
 * the newest export there, rotated to EXPORT_KEEP; src/export/scheduled.ts)
 * as a child process (./child-schedule.ts); the outcome lands in
 * `EXPORT_DIR/last-export.json`, which `status` and `/metrics` read.
 */
import { statSync } from 'node:fs';
import type { Logger } from 'pino';
import { exportVerdict, readLastExport, type ExportVerdict } from '../export/scheduled.js';
import { startChildSchedule, type ChildSchedule } from './child-schedule.js';
import { intervalOfExpression } from '../health/schedule-interval.js';

export function startExportSchedule(options: { dir: string; cron: string; logger: Logger }): ChildSchedule {
  return startChildSchedule({
    ...options,
    name: 'export',
    doneMessage: 'export written',
    outcome: (dir) => {
      const read = readLastExport(dir);
      const record = read.ok ? read.record : undefined;
      if (record?.ok === true) return { ok: true, facts: { dir: record.dir, kind: record.kind, rows: record.rows, bytes: record.bytes } };
      return { ok: false, error: record?.ok === false ? record.error : undefined };
    },
  });
}

/** The verdict on EXPORT_DIR now, for `status` and `/metrics`; a folder with no good export yet is judged from its creation. */
export function currentExportVerdict(dir: string, cron: string, now: Date = new Date()): ExportVerdict {
  let since: Date | undefined;
  try {
    const s = statSync(dir);
    since = s.birthtime.getTime() > 0 ? s.birthtime : s.mtime;
  } catch {
    since = undefined;
  }
  return exportVerdict(readLastExport(dir), intervalOfExpression(cron), now, since);
}
