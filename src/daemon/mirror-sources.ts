/**
 * What the daemon's scrape gauges read of its own mirror (scrape-gauges.ts,
 * finding-gauges.ts, backup-gauges.ts): each a function called on scrape, so
 * `/metrics` tells the state now, as `status` would.
 */
import { databaseFileSizes, type Db } from '../../db/open.js';
import { diskSpace } from '../../db/disk-space.js';
import type { MirrorReader } from '../../db/mirror-reader.js';
import { auditLocation } from '../../db/open-audit.js';
import { newestRunFindings } from '../../db/run-findings.js';
import { driftPairs, driftSince, lastFinishedRunId } from '../../db/schema-drift.js';
import { readWalIndex } from '../../db/wal-index.js';
import { whyNotWritable } from '../runtime/writable-file.js';
import { attemptWithoutRun, checkpointFigures } from '../sync/attempt-record.js';
import { currentBackupVerdict } from '../health/backup-folder.js';
import { currentExportVerdict } from '../health/export-verdict.js';
import type { DaemonConfig } from './daemon-config.js';
import type { MirrorWatch } from './mirror-watch.js';
import type { MetricSources } from './scrape-gauges.js';
import { mirrorFigures } from '../health/staleness.js';
import { lastFailedAttempt } from '../health/status-report.js';

export function mirrorSources(
  config: DaemonConfig,
  m: { db: Db; reader: MirrorReader; watch: MirrorWatch | undefined; staleAfterMs: number },
): MetricSources {
  const path = config.MIRROR_DB;
  const backupDir = config.BACKUP_DIR;
  const exportDir = config.EXPORT_DIR;
  const watch = m.watch;
  return {
    mirror: () => mirrorFigures(m.reader),
    staleAfterMs: m.staleAfterMs,
    files: () => ({ ...databaseFileSizes(path), walIndex: readWalIndex(path) }),
    checkpoints: config.MIRROR_CHECKPOINTS,
    checkpoint: () => checkpointFigures(path),
    ...(backupDir === undefined ? {} : { backups: () => currentBackupVerdict(backupDir, config.BACKUP_CRON) }),
    ...(exportDir === undefined ? {} : { exports: () => currentExportVerdict(exportDir, config.EXPORT_CRON) }),
    walWarnBytes: config.MIRROR_WAL_WARN_BYTES,
    lastAttemptFailed: () => lastFailedAttempt(m.reader.runHistory().lastRun, attemptWithoutRun(path)) !== null,
    ...(path === ':memory:' ? {} : { diskFree: () => diskSpace(path)?.freeBytes }),
    ...(watch === undefined ? {} : { mirrorLost: () => watch.check()?.what }),
    findings: () => newestRunFindings(m.db),
    schemaDrift: {
      startRunId: lastFinishedRunId(m.db),
      since: (after) => driftSince(m.db, after),
      pairs: (limit) => driftPairs(m.db, limit),
    },
    audit: () => whyNotWritable(auditLocation(config)),
    webhookLagWarnSeconds: config.WEBHOOK_LAG_WARN_SECONDS,
  };
}
