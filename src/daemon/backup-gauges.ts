/**
 * The scheduled backups' gauges, read on scrape from BACKUP_DIR's record
 * (backup-folder.ts), so a restarted daemon still tells how old the last
 * good copy is. Absent without BACKUP_DIR.
 */
import { Gauge, type Registry } from 'prom-client';
import type { MetricSources } from './scrape-gauges.js';

export function registerBackupGauges(registers: Registry[], current: () => MetricSources): void {
  const gauge = (name: string, help: string, pick: (v: NonNullable<ReturnType<NonNullable<MetricSources['backups']>>>) => number) =>
    new Gauge({
      name,
      help,
      registers,
      collect() {
        const read = current().backups;
        if (read === undefined) return;
        this.set(pick(read()));
      },
    });
  gauge(
    'user_mirror_backup_last_success_timestamp_seconds',
    'Unix time of the last good scheduled backup of the mirror (BACKUP_DIR; 0 if none).',
    (v) => (v.lastGoodAt === null ? 0 : Date.parse(v.lastGoodAt) / 1000),
  );
  gauge(
    'user_mirror_backup_last_bytes',
    'Size of the last good scheduled backup of the mirror, in bytes (0 if none).',
    (v) => v.lastGoodBytes ?? 0,
  );
  gauge('user_mirror_backup_last_failed', '1 when the newest scheduled backup attempt failed (status says why).', (v) =>
    v.failed === null ? 0 : 1,
  );
  gauge('user_mirror_backup_stale', '1 when the last good backup is older than twice the BACKUP_CRON interval (or there is none).', (v) =>
    v.stale ? 1 : 0,
  );
}
