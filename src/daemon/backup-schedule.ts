/**
 * Scheduled backups: on BACKUP_CRON (UTC), the daemon runs one attempt into
 * BACKUP_DIR (src/health/backup-folder.ts `backupIntoFolder`, the function
 * `user-mirror backup` alone runs too) in a child process of its own,
 * ./backup-main.ts (which says why a process), through ./child-schedule.ts;
 * the outcome lands in BACKUP_DIR's record, which `status` and `/metrics`
 * read.
 */
import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';
import { readLastBackup } from '../health/backup-folder.js';
import { startChildSchedule, type ChildSchedule } from './child-schedule.js';
import type { BackupJob } from './backup-main.js';

/** The child's entry: the built ./backup-main.js beside this file. */
const BACKUP_MAIN = fileURLToPath(new URL('./backup-main.js', import.meta.url));

export function startBackupSchedule(options: { job: BackupJob; cron: string; logger: Logger }): ChildSchedule {
  const { job, cron, logger } = options;
  return startChildSchedule({
    dir: job.dir,
    cron,
    logger,
    name: 'backup',
    child: [BACKUP_MAIN, JSON.stringify(job)],
    doneMessage: 'backup written',
    outcome: (dir) => {
      const read = readLastBackup(dir);
      const record = read.ok ? read.record : undefined;
      if (record?.ok === true) return { ok: true, facts: { mirror: record.mirror, audit: record.audit ?? null } };
      return { ok: false, error: record?.ok === false ? record.error : undefined };
    },
  });
}
