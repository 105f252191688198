/**
 * The scheduled backups' and exports' gauges, read on scrape from their
 * folders' records (src/health/backup-folder.ts, src/export/scheduled.ts), so a
 * restarted daemon still tells how old the last good one is. Absent without
 * BACKUP_DIR (EXPORT_DIR).
 */
import { Gauge, type Registry } from 'prom-client';
import type { MetricSources } from './scrape-gauges.js';

/** A gauge set on scrape from one verdict source of MetricSources; unset when that source is absent. */
function verdictGauge<V>(
  registers: Registry[],
  source: () => (() => V) | undefined,
): (name: string, help: string, pick: (verdict: V) => number) => void {
  return (name, help, pick) =>
    new Gauge({
      name,
      help,
      registers,
      collect() {
        const read = source();
        if (read === undefined) return;
        this.set(pick(read()));
      },
    });
}

export function registerBackupGauges(registers: Registry[], current: () => MetricSources): void {
  const gauge = verdictGauge(registers, () => current().backups);
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

export function registerExportGauges(registers: Registry[], current: () => MetricSources): void {
  const gauge = verdictGauge(registers, () => current().exports);
  gauge(
    'user_mirror_export_last_success_timestamp_seconds',
    'Unix time of the last good scheduled export for a lake (EXPORT_DIR; 0 if none).',
    (v) => (v.lastGoodAt === null ? 0 : Date.parse(v.lastGoodAt) / 1000),
  );
  gauge('user_mirror_export_last_rows', 'Rows in the files of the last good scheduled export (0 if none).', (v) => v.lastGoodRows ?? 0);
  gauge('user_mirror_export_last_bytes', 'Bytes of the files of the last good scheduled export (0 if none).', (v) => v.lastGoodBytes ?? 0);
  gauge('user_mirror_export_last_failed', '1 when the newest scheduled export attempt failed (status says why).', (v) =>
    v.failed === null ? 0 : 1,
  );
  gauge('user_mirror_export_stale', '1 when the last good export is older than twice the EXPORT_CRON interval (or there is none).', (v) =>
    v.stale ? 1 : 0,
  );
}
