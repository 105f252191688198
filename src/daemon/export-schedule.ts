/**
 * Scheduled exports for a lake: on EXPORT_CRON (UTC), the daemon runs
 * `user-mirror export` (the scheduled form into EXPORT_DIR: incremental from
 * the newest export there, rotated to EXPORT_KEEP; src/export/scheduled.ts)
 * as a child process (./child-schedule.ts); the outcome lands in
 * `EXPORT_DIR/last-export.json`, which `status` and `/metrics` read.
 */
import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';
import { readLastExport } from '../export/scheduled.js';
import { startChildSchedule, type ChildSchedule } from './child-schedule.js';

/** The CLI's bin: the child runs the command itself, under the export's V8 flags (src/entry.ts re-executes with them). */
const CLI_ENTRY = fileURLToPath(new URL('../entry.js', import.meta.url));

export function startExportSchedule(options: { dir: string; cron: string; logger: Logger }): ChildSchedule {
  return startChildSchedule({
    ...options,
    name: 'export',
    child: [CLI_ENTRY, 'export', '--json'],
    doneMessage: 'export written',
    outcome: (dir) => {
      const read = readLastExport(dir);
      const record = read.ok ? read.record : undefined;
      if (record?.ok === true) return { ok: true, facts: { dir: record.dir, kind: record.kind, rows: record.rows, bytes: record.bytes } };
      return { ok: false, error: record?.ok === false ? record.error : undefined };
    },
  });
}
