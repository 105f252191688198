/**
 * The daemon's two workers, each restartable by the watchdog with a Redis
 * connection of its own: the sync worker, which runs each job in a child
 * process, and the removal worker. Built here; started, watched and closed
 * by ./daemon.ts.
 */
import type { RemovalAudit } from '../../db/removal-audit.js';
import type { FileIdentity } from '../../db/file-identity.js';
import { createRedisConnection, type RedisEndpoint } from '../../jobs/redis-connection.js';
import type { ManagementTarget } from '../../jobs/removals/contract.js';
import { startRemovalWorker, type RemovalWorkerHandle } from '../../jobs/removals/worker.js';
import { startSyncWorker, type SyncWorkerHandle } from '../../jobs/sync/worker.js';
import type { ServiceClient } from '../service/client.js';
import { syncInChildProcess, type LeasedSyncRunner } from '../sync/child-process.js';
import type { DaemonConfig } from './daemon-config.js';
import type { DaemonMetrics } from './metrics.js';
import { restartableWorker, type RestartableWorker } from './watchdog.js';
import type { SyncSummary } from '../sync/run-summary.js';
import type { Logger } from 'pino';

/**
 * How long an aborted sync process may take to record its run before it is
 * killed (only a publish, which cannot be interrupted, takes long; killing it
 * rolls the publish back).
 */
const SYNC_KILL_AFTER_ABORT_MS = 30_000;

/** How long a watchdog restart waits for the stuck worker before dropping it. */
const RESTART_CLOSE_MS = 10_000;

/**
 * How long a sync process has to exit once it has reported its run: it then
 * copies the WAL into the mirror (seconds; more after a first sync of
 * millions) and closes its files and connections. A checkpoint cut short by
 * the kill is safe: the next run retries it first.
 */
const SYNC_EXIT_WITHIN_MS = 120_000;

/**
 * From its start, how long a sync process may run before the daemon stops
 * it: the run's own deadline (SYNC_MAX_DURATION_MS, which the engine keeps by
 * itself), plus the time an aborted run has to record itself.
 */
function syncProcessMaxRunMs(maxDurationMs: number): number {
  return maxDurationMs + SYNC_KILL_AFTER_ABORT_MS;
}

/**
 * A sync job still running this long has outlived every deadline the sync
 * process is held to (its own, then the daemon's, then the kill): the watchdog
 * replaces the worker that runs it.
 */
export function syncJobOverdueMs(maxDurationMs: number): number {
  return syncProcessMaxRunMs(maxDurationMs) + SYNC_EXIT_WITHIN_MS + 2 * SYNC_KILL_AFTER_ABORT_MS;
}

/** What both workers share: where Redis is, the queues' prefix, the log and the metrics. */
export interface WorkerSetting {
  endpoint: RedisEndpoint;
  prefix: string;
  logger: Logger;
  metrics: DaemonMetrics;
}

/**
 * The daemon's sync worker of `sync.mirrorId`; `afterSync` hears of each
 * finished run (webhook delivery). `mirror`: the file the daemon opened; each job
 * first checks it is still there (src/daemon/mirror-watch.ts), and its child
 * writes into that file only.
 */
export function syncWorkerOf(
  w: WorkerSetting,
  sync: { mirrorId: string; maxDurationMs: number },
  afterSync: () => void,
  mirror?: { opened: FileIdentity; lost: () => string | undefined },
): RestartableWorker<SyncWorkerHandle<SyncSummary>> {
  return restartableWorker<SyncWorkerHandle<SyncSummary>>({
    name: 'sync',
    restartCloseTimeoutMs: RESTART_CLOSE_MS,
    start: () => {
      const redis = createRedisConnection(w.endpoint, { role: 'worker', logger: w.logger, connectionName: 'user-mirror:sync-worker' });
      const handle = startSyncWorker({
        connection: redis,
        prefix: w.prefix,
        mirrorId: sync.mirrorId,
        logger: w.logger,
        onResult: (r) => {
          w.metrics.recordSync(r);
          afterSync();
        },
        // Off the event loop: a publish holds SQLite for seconds (src/sync/child-main.ts).
        run: guardedRun(
          syncInChildProcess({
            onResponse: (e) => w.metrics.recordHttp(e),
            killAfterMs: SYNC_KILL_AFTER_ABORT_MS,
            exitWithinMs: SYNC_EXIT_WITHIN_MS,
            maxRunMs: syncProcessMaxRunMs(sync.maxDurationMs),
            logger: w.logger,
          }),
          mirror,
        ),
      });
      return { handle, dispose: () => redis.disconnect() };
    },
    close: (handle, ms) => handle.close(ms),
  });
}

/** A sync that starts only while the daemon's mirror file is still at MIRROR_DB, and is told which file that is. */
function guardedRun(run: LeasedSyncRunner, mirror: { opened: FileIdentity; lost: () => string | undefined } | undefined): LeasedSyncRunner {
  if (mirror === undefined) return run;
  return (signal, job) => {
    const lost = mirror.lost();
    return lost === undefined ? run(signal, { ...job, mirrorFile: mirror.opened }) : Promise.reject(new Error(lost));
  };
}

/** The removal worker of one management target. */
export function removalWorkerOf(
  w: WorkerSetting,
  config: Pick<DaemonConfig, 'REMOVAL_CONCURRENCY' | 'REMOVAL_BACKOFF_MS' | 'REMOVAL_LOCK_MS'>,
  removals: { target: ManagementTarget; client: ServiceClient; audit: RemovalAudit },
): RestartableWorker<RemovalWorkerHandle> {
  return restartableWorker<RemovalWorkerHandle>({
    name: 'removals',
    restartCloseTimeoutMs: RESTART_CLOSE_MS,
    start: () => {
      const redis = createRedisConnection(w.endpoint, { role: 'worker', logger: w.logger, connectionName: 'user-mirror:removal-worker' });
      const handle = startRemovalWorker({
        connection: redis,
        target: removals.target,
        prefix: w.prefix,
        client: removals.client,
        audit: removals.audit,
        logger: w.logger,
        concurrency: config.REMOVAL_CONCURRENCY,
        backoffMs: config.REMOVAL_BACKOFF_MS,
        lockDurationMs: config.REMOVAL_LOCK_MS,
        onOutcome: (outcome) => w.metrics.recordRemoval(outcome),
      });
      return { handle, dispose: () => redis.disconnect() };
    },
    close: async (handle, ms) => (await handle.close(ms)).drained,
  });
}
