/**
 * The daemon: wires the schedule, the sync worker, the removal worker, the
 * watchdog and the status endpoint together. Each piece decides on its own
 * terms (see their files); this file only decides the order.
 *
 * Start-up:
 *  1. open the mirror and the removal audit (its own file, AUDIT_DB: see
 *     db/open-audit.ts); a bad path or a corrupt file ends the process: that
 *     needs a human, and pm2's backoff keeps the retries slow. A file
 *     write-locked by another process's sync is waited for, logged
 *     (startup-waits.ts);
 *  2. serve /healthz, /readyz (503 for now) and /metrics;
 *  3. wait for Redis, retrying with backoff and logging, for as long as it
 *     takes. The process never exits for an unreachable Redis: exiting would
 *     turn a Redis outage into a pm2 restart loop. pm2's `listen_timeout`
 *     will pass first and pm2 then shows the app as online without 'ready';
 *     /readyz says the truth (503) until Redis answers;
 *  4. read Redis's persistence and eviction settings: the removal worker
 *     starts only if Redis keeps queued jobs (or ALLOW_VOLATILE_REDIS=1),
 *     else removals are held (logged, in /readyz, status and /metrics) and
 *     the sync half runs regardless (see jobs/redis-durability.ts). Webhooks
 *     follow the same verdict (held, and said so, on a Redis that can lose
 *     jobs); a daemon without removals says nothing of holding them;
 *  5. start the workers, enqueue a catch-up sync if the mirror is stale,
 *     start the schedule and the watchdog. Without MANAGEMENT_URL and
 *     MANAGEMENT_KEY there is no removal worker (`daemon.removals_off` at
 *     start): a sync-and-webhooks deployment has no management service, and
 *     /readyz and `status` do not count removals against it;
 *  6. `process.send('ready')` (pm2 `wait_ready`). /readyz turns 200 once
 *     the mirror is also fresh: a succeeded sync within SYNC_STALE_AFTER_MS
 *     (see src/health/staleness.ts); a new, never-synced mirror is not ready until its
 *     first sync succeeds.
 *
 * Each sync job runs in a child process (src/sync/child-main.ts): a publish is
 * seconds of synchronous SQLite, and this event loop must keep answering
 * /healthz, renewing BullMQ locks and running removals meanwhile. This
 * process only reads the mirror (readiness, metrics).
 *
 * Shutdown (SIGINT from `pm2 stop`, SIGTERM): see shutdown.ts for signals.
 * Every part is recorded with its stop as it starts (./subsystems.ts), and
 * `stop` below runs them in reverse: the backup and export schedules first
 * (no new work), then the watchdog, the schedule and the condition watch,
 * the workers drained in parallel within SHUTDOWN_TIMEOUT_MS (a sync still
 * running near the end is aborted and recorded as failed; the mirror stays
 * as it was), the queues, the replica, the status server, Redis, the HTTP
 * pool, the sinks and SQLite.
 */
import { logError } from '../runtime/log-error.js';
import { openMirror, type Db } from '../../db/open.js';
import { MirrorReader } from '../../db/mirror-reader.js';
import { createRemovalAudit } from '../../db/removal-audit.js';
import { auditLocation, openAudit } from '../../db/open-audit.js';
import { createRedisConnection, describeRedis, queueSettingsFromConfig, type RedisClient } from '../../jobs/redis-connection.js';
import { managementClientFromConfig } from '../service/client-from-config.js';
import { createRemovalQueue } from '../../jobs/removals/queue-handle.js';
import { logUnbound, openUnboundQueue } from '../../jobs/removals/unbound.js';
import { describeHeldWebhooks, type RemovalGate } from '../../jobs/redis-durability.js';
import { syncQueueName } from '../../jobs/sync/contract.js';
import { openWhenUnlocked, readRemovalGate, waitForRedis } from './startup-waits.js';
import { createMetrics } from './metrics.js';
import { queueDepths } from './scrape-gauges.js';
import { enqueueCatchUpIfStale, enqueueTick, startSchedule } from './schedule.js';
import { intervalOfExpression } from '../health/schedule-interval.js';
import { settleWithin } from '../runtime/deadline.js';
import { remainingBudget } from './shutdown.js';
import { readinessOf, startStatusServer } from './status-server.js';
import { startWatchdog, watchedWorker, type WatchedWorker } from './watchdog.js';
import { removalWorkerOf, syncJobOverdueMs, syncWorkerOf } from './workers.js';
import { mirrorFreshness, staleAfterMs } from '../health/staleness.js';
import { keepLoss } from '../sync/exclusive-run.js';
import { fileIdentity } from '../../db/file-identity.js';
import { MirrorWatch } from './mirror-watch.js';
import { daemonReplicaSettings } from '../replica/settings.js';
import { startReplica, type Replica } from '../replica/start.js';
import { startChangeDelivery, webhookSettings, type ChangeDelivery } from './change-delivery.js';
import { ChangeFeed } from '../../db/change-feed.js';
import { startSinks } from '../sinks/start.js';
import { registerSinkGauges } from './sink-gauges.js';
import { managementOf, type DaemonConfig } from './daemon-config.js';
import { sinksOf, type WebhookSink } from '../sinks/sinks-file.js';
import { mirrorSources } from './mirror-sources.js';
import { startBackupSchedule } from './backup-schedule.js';
import { Subsystems } from './subsystems.js';
import { startExportSchedule } from './export-schedule.js';
import { whyNotWritable } from '../runtime/writable-file.js';
import { startConditionWatch } from './condition-watch.js';
import { urlTarget } from '../../jobs/url-target.js';
import type { Logger } from 'pino';
import { createSyncQueue } from '../../jobs/sync/queue-handle.js';

type Phase = 'starting' | 'running' | 'stopping';

export interface Daemon {
  /**
   * Resolves when start-up is complete (or was cut short by `stop`). Every
   * step after the Redis wait only constructs objects, so a rejection is a
   * bug: the caller should exit and let the supervisor start afresh.
   */
  started: Promise<void>;
  statusPort: number;
  /** Graceful stop; resolves with the exit code. */
  stop(): Promise<number>;
}

export interface DaemonDeps {
  logger: Logger;
  /** pm2's IPC channel; absent when not run under a supervisor. */
  send?: (message: string) => void;
}

export async function startDaemon(config: DaemonConfig, deps: DaemonDeps): Promise<Daemon> {
  const log = deps.logger;
  const replicaSettings = daemonReplicaSettings(config);
  const startAbort = new AbortController();
  let phase: Phase = 'starting';
  const { endpoint, prefix } = queueSettingsFromConfig(config);
  const where = describeRedis(endpoint);
  const management = managementOf(config);
  const target = management === undefined ? undefined : urlTarget(management.MANAGEMENT_URL);
  const webhooks = webhookSettings(config);
  const sinkList = sinksOf(config);

  log.info(
    {
      event: 'daemon.starting',
      node: process.version,
      mirrorId: config.MIRROR_ID,
      mirrorDb: config.MIRROR_DB,
      auditDb: auditLocation(config),
      syncQueue: `${prefix}:${syncQueueName(config.MIRROR_ID)}`,
      removalTarget: target?.id ?? null,
      managementUrl: target?.url ?? null,
      cron: config.SYNC_CRON,
      redis: where,
    },
    'daemon starting',
  );
  if (target === undefined)
    log.info(
      { event: 'daemon.removals_off', reason: 'MANAGEMENT_URL is unset' },
      'removals off: MANAGEMENT_URL is unset (set it and MANAGEMENT_KEY to run the removal worker)',
    );

  // Every part started is recorded with its stop; the stop below runs them in reverse (./subsystems.ts).
  const parts = new Subsystems(log);
  const db: Db = await openWhenUnlocked('mirror', () => openMirror(config.MIRROR_DB, { checkpoints: config.MIRROR_CHECKPOINTS }), log);
  parts.add('the mirror', () => db.close());
  const auditDb = await parts.starting(() =>
    openWhenUnlocked('audit', () => openAudit(auditLocation(config), { legacyMirror: config.MIRROR_DB }), log),
  );
  parts.add('the audit', () => auditDb.close());
  let replica: Replica | undefined;
  // The file opened, watched at each sync, scrape and /readyz (./mirror-watch.ts); none for an in-memory mirror.
  const opened = config.MIRROR_DB === ':memory:' ? undefined : fileIdentity(config.MIRROR_DB);
  const watch =
    opened === undefined
      ? undefined
      : new MirrorWatch(config.MIRROR_DB, opened, (loss) => {
          log.error({ event: 'mirror.lost', what: loss.what, mirrorDb: config.MIRROR_DB }, loss.message);
          keepLoss(config.MIRROR_DB, loss, log);
          // The replica answered from the old file: it stops rather than serve what is no longer the mirror.
          void replica?.close();
          replica = undefined;
        });
  const reader = new MirrorReader(db);
  const staleAfter = staleAfterMs(config.SYNC_STALE_AFTER_MS, intervalOfExpression(config.SYNC_CRON));
  const metrics = createMetrics();
  metrics.setSources(mirrorSources(config, { db, reader, watch, staleAfterMs: staleAfter }));
  // The sinks (src/sinks) read the feed and write to their own destinations: they wait for neither the queues' Redis nor the service.
  let countDelivered: ((sink: string, kind: string, n: number) => void) | undefined;
  const sinks =
    sinkList.length === 0
      ? undefined
      : await parts.starting(() =>
          startSinks(new ChangeFeed(db), sinkList, log, (...a) => countDelivered?.(...a), { mirrorPath: config.MIRROR_DB }),
        );
  if (sinks !== undefined) parts.add('the sinks', () => sinks.close());
  // Webhook sinks go through their BullMQ queues (./change-delivery.ts) once Redis answers; they report beside the others.
  const webhookSinks = sinkList.filter((s): s is WebhookSink => s.kind === 'webhook');
  let delivery: ChangeDelivery | undefined;
  if (sinks !== undefined)
    countDelivered = registerSinkGauges(metrics.registry, {
      report: (now) => [...sinks.report(now), ...(delivery?.sinkReport(now) ?? [])],
    });

  const managementClient =
    management === undefined
      ? undefined
      : managementClientFromConfig({ ...config, ...management }, config.REMOVAL_CONCURRENCY, {
          onResponse: (e) => metrics.recordHttp(e),
        });
  if (managementClient !== undefined) parts.add('the management client', () => settleWithin(managementClient.close(), 2_000));

  const control: RedisClient = createRedisConnection(endpoint, {
    role: 'control',
    logger: log,
    connectionName: 'user-mirror:daemon-control',
  });
  parts.add('the Redis connection', () => control.disconnect());
  // What start-up learns later, read by /readyz meanwhile.
  let removalGate: RemovalGate | undefined;

  const readiness = readinessOf(
    {
      db,
      reader,
      control,
      staleAfterMs: staleAfter,
      removalsConfigured: target !== undefined,
      removalGate: () => removalGate,
      webhookLag: () => (delivery?.queue === undefined ? undefined : delivery.lag()),
      webhooksHeld: () => (webhooks === undefined || removalGate === undefined ? undefined : describeHeldWebhooks(removalGate)),
      mirrorLost: () => watch?.check()?.message,
    },
    () => phase,
  );

  const status = await parts.starting(() =>
    startStatusServer({
      host: config.STATUS_HOST,
      port: config.STATUS_PORT,
      registry: metrics.registry,
      readiness,
      logger: log,
    }),
  );
  parts.add('the status server', () => status.close());
  // The mirror as a replica (src/replica): its own readonly connection, answering while syncs publish.
  if (replicaSettings !== undefined) {
    replica = await parts.starting(() => startReplica(config.MIRROR_DB, replicaSettings, log, metrics.registry));
    // The one running now: a lost mirror file closes it early (the watch above).
    parts.add('the replica', () => replica?.close());
  }
  if (config.BACKUP_DIR !== undefined) {
    const job = { dir: config.BACKUP_DIR, mirror: config.MIRROR_DB, audit: auditLocation(config), keep: config.BACKUP_KEEP };
    const backups = await parts.starting(() => startBackupSchedule({ job, cron: config.BACKUP_CRON, logger: log }));
    parts.add('the backup schedule', () => backups.stop(), 'intake');
  }
  if (config.EXPORT_DIR !== undefined) {
    const dir = config.EXPORT_DIR;
    const exports = await parts.starting(() => startExportSchedule({ dir, cron: config.EXPORT_CRON, logger: log }));
    parts.add('the export schedule', () => exports.stop(), 'intake');
  }

  let drained = { syncDrained: true, removalsDrained: true };
  const start = async (): Promise<void> => {
    if (!(await waitForRedis(control, { logger: log, where, signal: startAbort.signal }))) return;

    const syncQueue = createSyncQueue({ connection: control, prefix, mirrorId: config.MIRROR_ID });
    const removalQueue = target === undefined ? undefined : createRemovalQueue(control, { target, prefix });
    const unboundQueue = openUnboundQueue(control, prefix);
    parts.add('the queues', () => settleWithin(Promise.all([syncQueue.close(), removalQueue?.close(), unboundQueue.close()]), 2_000));
    syncQueue.on('error', (err) => log.debug({ event: 'sync_queue.error', err: err.message }, 'sync queue error'));
    removalQueue?.on('error', (err) => log.debug({ event: 'removal_queue.error', err: err.message }, 'removal queue error'));
    const gate = await readRemovalGate(control, config.ALLOW_VOLATILE_REDIS, {
      logger: log,
      where,
      signal: startAbort.signal,
      removals: target !== undefined,
    });
    if (gate === undefined) return;
    removalGate = gate;
    metrics.recordRemovalGate({ durable: gate.verdict.durable, held: target !== undefined && gate.state === 'held' });

    const workers = { endpoint, prefix, logger: log, metrics };
    const syncWorker = syncWorkerOf(
      workers,
      { mirrorId: config.MIRROR_ID, maxDurationMs: config.SYNC_MAX_DURATION_MS },
      () => {
        sinks?.nudge();
        void delivery?.afterSync();
      },
      watch === undefined ? undefined : { opened: watch.opened, lost: () => watch.check()?.message },
    );

    const removalWorker =
      gate.state === 'run' && target !== undefined && managementClient !== undefined
        ? removalWorkerOf(workers, config, { target, client: managementClient, audit: createRemovalAudit(auditDb) })
        : undefined;

    // The change feed: retention always; webhooks where configured, on a Redis that keeps jobs (as removals).
    const feed = startChangeDelivery({
      db,
      config,
      webhooks,
      webhookSinks,
      redis: { control, endpoint, prefix, held: describeHeldWebhooks(gate) },
      logger: log,
      onOutcome: (o, sink) => {
        metrics.recordWebhook(o.outcome);
        if (sink !== undefined && o.outcome === 'delivered') countDelivered?.(sink, 'webhook', 1);
      },
      ...(sinks === undefined ? {} : { sinksHold: sinks.hold }),
    });
    delivery = feed;
    // The workers drain together, within what is left of SHUTDOWN_TIMEOUT_MS: a sync still running near the end is aborted.
    parts.add('the workers', async (since) => {
      const budget = () => remainingBudget(since, config.SHUTDOWN_TIMEOUT_MS, Date.now());
      const [syncDrained, removalsDrained] = await Promise.all([
        syncWorker.close(budget()),
        removalWorker?.close(budget()) ?? true,
        feed.close(budget()),
      ]);
      drained = { syncDrained, removalsDrained };
    });
    const queues = { sync: syncQueue, removals: removalQueue, removals_unbound: unboundQueue, webhooks: feed.queue };
    metrics.setSources({
      queues: () => queueDepths(queues),
      redisUp: async () => (await control.ping()) === 'PONG',
      ...(feed.queue === undefined ? {} : { webhookLag: feed.lag }),
    });
    const lagging = feed.queue === undefined ? undefined : feed.lag;
    const conditions = startConditionWatch(log, [
      { event: 'audit.unwritable', check: () => whyNotWritable(auditLocation(config)) },
      ...(lagging === undefined ? [] : [{ event: 'webhooks.lagging', check: async () => laggingPast(await lagging(), config) }]),
    ]);
    parts.add('the condition watch', () => conditions.stop());

    if (phase !== 'starting') return;
    const schedule = startSchedule({
      expression: config.SYNC_CRON,
      logger: log,
      onTick: (tick) => enqueueTick(syncQueue, tick, log),
    });
    parts.add('the schedule', () => schedule.stop());
    const overdueMs = syncJobOverdueMs(config.SYNC_MAX_DURATION_MS);
    const watched: WatchedWorker[] = [
      watchedWorker(
        syncWorker,
        syncQueue,
        (h) => h.worker.isRunning(),
        (h, now) => (h.runningSince() ?? now) <= now - overdueMs,
      ),
    ];
    if (removalWorker !== undefined && removalQueue !== undefined)
      watched.push(watchedWorker(removalWorker, removalQueue, (h) => h.worker.isRunning()));
    metrics.watchWorkers(watched.map((w) => w.name));
    const watchdog = startWatchdog({
      workers: watched,
      intervalMs: config.WATCHDOG_INTERVAL_MS,
      stallMs: config.WATCHDOG_STALL_MS,
      logger: log,
      onRestart: (worker, reason) => metrics.recordWorkerRestart(worker, reason),
    });
    parts.add('the watchdog', () => watchdog.stop());

    await logUnbound(unboundQueue, log);

    try {
      await enqueueCatchUpIfStale(syncQueue, schedule, () => mirrorFreshness(reader).lastSucceededAt, log);
    } catch (err) {
      // Redis went away again, or the mirror is busy: the next tick syncs anyway.
      logError(log, 'warn', { event: 'startup_sync.failed', err }, 'could not check for a start-up sync');
    }

    if (phase !== 'starting') return;
    phase = 'running';
    log.info({ event: 'daemon.ready', statusPort: status.port }, 'daemon ready');
    deps.send?.('ready');
  };

  const started = start();

  const stop = async (): Promise<number> => {
    const t0 = Date.now();
    phase = 'stopping';
    startAbort.abort();
    await settleWithin(started, 2_000);
    const clean = await parts.stopAll(t0);
    log.info(
      { event: 'daemon.stopped', clean, ...drained, durationMs: Date.now() - t0 },
      clean ? 'daemon stopped gracefully' : 'daemon stopped; a part failed to stop',
    );
    return clean ? 0 : 1;
  };

  return { started, statusPort: status.port, stop };
}

/** Why webhook delivery counts as lagging (behind WEBHOOK_LAG_WARN_SECONDS), or undefined. */
function laggingPast(lag: { eventsBehind: number; secondsBehind: number }, config: DaemonConfig): string | undefined {
  if (lag.secondsBehind <= config.WEBHOOK_LAG_WARN_SECONDS) return undefined;
  return `webhook delivery ${lag.secondsBehind}s behind (${lag.eventsBehind} events), above WEBHOOK_LAG_WARN_SECONDS (${config.WEBHOOK_LAG_WARN_SECONDS}s): the receiver is too slow or does not answer`;
}
