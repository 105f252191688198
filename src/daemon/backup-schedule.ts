/**
 * Scheduled backups: on BACKUP_CRON (UTC), the daemon runs `user-mirror
 * backup` (src/commands/backup.ts, the scheduled form into BACKUP_DIR) as a
 * child process (./child-schedule.ts); the outcome lands in BACKUP_DIR's
 * record, which `status` and `/metrics` read.
 */
import type { Logger } from 'pino';
import { readLastBackup } from '../health/backup-folder.js';
import { startChildSchedule, type ChildSchedule } from './child-schedule.js';

export type BackupSchedule = ChildSchedule;

export function startBackupSchedule(options: { dir: string; cron: string; logger: Logger }): BackupSchedule {
  return startChildSchedule({
    ...options,
    name: 'backup',
    doneMessage: 'backup written',
    outcome: (dir) => {
      const read = readLastBackup(dir);
      const record = read.ok ? read.record : undefined;
      if (record?.ok === true) return { ok: true, facts: { mirror: record.mirror, audit: record.audit ?? null } };
      return { ok: false, error: record?.ok === false ? record.error : undefined };
    },
  });
}
