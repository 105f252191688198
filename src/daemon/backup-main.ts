/**
 * The daemon's scheduled backup, in a process of its own (started on
 * BACKUP_CRON by ./backup-schedule.ts): one attempt into BACKUP_DIR
 * (src/health/backup-folder.ts `backupIntoFolder`, the one function
 * `user-mirror backup` alone runs too), then exit: 0 copied, 1 failed (the
 * reason on stderr and in the folder's record, which the daemon reads).
 *
 * Why a process: the copy is `VACUUM INTO` and a `quick_check` of the copy,
 * which better-sqlite3 runs synchronously: 9.6 s for a 100,000-user mirror,
 * 31.6 s for 1,000,000 (bench/README.md, `bench:backup`, a busy machine).
 * In the daemon that froze its event loop as long: /readyz and /metrics
 * unanswered, the replica silent, BullMQ's lock renewals late. Here it
 * freezes only this process, and its memory and a crash stay here too.
 *
 * What to copy comes from the daemon as one argument (the paths it
 * resolved, and BACKUP_KEEP; no secret). The file policy (MIRROR_GROUP)
 * comes from the environment inherited from the daemon, which checked it.
 */
import { applyFilePolicy } from '../runtime/file-policy.js';
import { errorMessage } from '../runtime/line-text.js';
import { formatIssues } from '../runtime/zod-issues.js';
import { backupIntoFolder } from '../health/backup-folder.js';
import { z } from 'zod';

/** What one attempt copies where: the paths the daemon resolved from its configuration, and BACKUP_KEEP. No secret. */
const BackupJobSchema = z.object({
  dir: z.string().min(1),
  mirror: z.string().min(1),
  audit: z.string().min(1),
  keep: z.number().int().positive(),
});
export type BackupJob = z.infer<typeof BackupJobSchema>;

function main(): number {
  let raw: unknown;
  try {
    raw = JSON.parse(process.argv[2] ?? '');
  } catch (err) {
    process.stderr.write(`backup: the job argument is not JSON: ${errorMessage(err)}\n`);
    return 2;
  }
  const job = BackupJobSchema.safeParse(raw);
  if (!job.success) {
    process.stderr.write(`backup: the job argument: ${formatIssues(job.error.issues)}\n`);
    return 2;
  }
  // Before any file is created: the copies are this account's alone (or MIRROR_GROUP's), whatever the umask.
  applyFilePolicy();
  const { dir, mirror, audit, keep } = job.data;
  const record = backupIntoFolder(dir, mirror, audit, keep);
  if (record.ok) return 0;
  process.stderr.write(`backup failed: ${record.error ?? 'unknown'}\n`);
  return 1;
}

process.exitCode = main();
