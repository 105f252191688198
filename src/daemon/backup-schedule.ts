/**
 * Scheduled backups: on BACKUP_CRON (UTC), the daemon runs `user-mirror
 * backup` (src/commands/backup.ts, the scheduled form into BACKUP_DIR) as a
 * child process. A copy of a large mirror takes seconds of synchronous
 * SQLite work: in a child it never stalls the daemon's event loop (its
 * /metrics, its replica, its queues). Each host backs up its own mirror, so
 * this is a local timer, not a queue job. An attempt still running when the
 * next tick comes is not doubled (noOverlap); every outcome is logged and
 * lands in BACKUP_DIR's record, which `status` and `/metrics` read.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { logError } from '../runtime/log-error.js';
import { nodeCron } from '../runtime/node-cron.js';
import { readLastBackup } from './backup-folder.js';
import { SCHEDULE_TIMEZONE } from './schedule.js';
import type { Logger } from 'pino';

const ENTRY = fileURLToPath(new URL('../entry.js', import.meta.url));

export interface BackupSchedule {
  stop(): Promise<void>;
}

export function startBackupSchedule(options: { dir: string; cron: string; logger: Logger }): BackupSchedule {
  const log = options.logger;
  const task = nodeCron().schedule(
    options.cron,
    // A copy still running at shutdown finishes in its child (it renames into place only when whole): not waited for.
    () => runBackup(options.dir, log),
    { name: 'backup-schedule', timezone: SCHEDULE_TIMEZONE, noOverlap: true },
  );
  task.on('execution:overlap', () => log.warn({ event: 'backup.overlap' }, 'the previous backup is still running; skipped this tick'));
  log.info(
    { event: 'backup.scheduled', dir: options.dir, cron: options.cron, next: task.getNextRun()?.toISOString() },
    'backups scheduled',
  );
  return {
    async stop() {
      await task.destroy();
    },
  };
}

/** One attempt in a child; resolves when it ended, however it ended (the record says how). */
async function runBackup(dir: string, log: Logger): Promise<void> {
  const started = Date.now();
  const exit = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
    execFile(process.execPath, [ENTRY, 'backup', '--json'], { maxBuffer: 1024 * 1024 }, (err, _stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : null, stderr: stderr.slice(0, 2_000) });
    });
  });
  const read = readLastBackup(dir);
  const record = read.ok ? read.record : undefined;
  const ms = Date.now() - started;
  if (exit.code === 0 && record?.ok === true) {
    log.info({ event: 'backup.done', ms, mirror: record.mirror, audit: record.audit ?? null }, 'backup written');
    return;
  }
  const error = record?.ok === false ? record.error : exit.stderr.trim() || `exit ${String(exit.code)}`;
  logError(log, 'error', { event: 'backup.failed', ms, exitCode: exit.code, err: new Error(error) }, 'scheduled backup failed');
}
