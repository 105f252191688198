/**
 * The verdict on EXPORT_DIR now, for `status` and `/metrics`: the record
 * the scheduled export left there (src/export/scheduled.ts) against
 * EXPORT_CRON's interval; a folder with no good export yet is judged from
 * its creation, as BACKUP_DIR is (./backup-folder.ts).
 */
import { exportVerdict, readLastExport, type ExportVerdict } from '../export/scheduled.js';
import { folderSince } from './backup-folder.js';
import { intervalOfExpression } from './schedule-interval.js';

export function currentExportVerdict(dir: string, cron: string, now: Date = new Date()): ExportVerdict {
  return exportVerdict(readLastExport(dir), intervalOfExpression(cron), now, folderSince(dir));
}
