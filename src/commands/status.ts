/**
 * `user-mirror status [--json]`: last sync runs, mirror size and age, queue
 * depths (sync and removals), failed removals, whether Redis keeps
 * queued removals (AOF, eviction policy; held unless ALLOW_VOLATILE_REDIS=1),
 * the change feed and, with WEBHOOK_URL set, how far behind its delivery is. Human-readable by
 * default; `--json` prints the same report as one JSON object.
 *
 * Works without the daemon, and without Redis: the mirror part comes from
 * the SQLite file (opened read-only), and an unreachable Redis is reported
 * as such rather than waited for.
 *
 * Exit codes (the report is printed in every case but usage errors):
 *   0  all well: the mirror is readable and fresh; with MANAGEMENT_URL set,
 *      Redis answers and keeps removals, and none waits without a target;
 *   1  needs attention: the mirror is stale (no succeeded sync within
 *      SYNC_STALE_AFTER_MS) or unreadable; with MANAGEMENT_URL set, also
 *      Redis unreachable, removals held, or removals without a target;
 *      with WEBHOOK_URL set, also Redis unreachable, or delivery further
 *      behind than WEBHOOK_LAG_WARN_SECONDS (failed events are shown, not
 *      judged). Without either (a sync-only estate) Redis is only
 *      reported. In every estate, also: the newest published run rejected
 *      records or left identity conflicts standing, or the removal audit
 *      cannot be written;
 *   2  usage or configuration error, MIRROR_DB naming something that cannot
 *      be a mirror (a directory, a device, not a SQLite file) included.
 */
import { existsSync } from 'node:fs';
import { Queue } from 'bullmq';
import { z } from 'zod';
import { parseCommandArgs } from './args.js';
import { ConfigPass, isGiven } from '../runtime/config.js';
import { QUEUE_ENV, createRedisConnection, queueSettingsFromConfig, redisReady, type QueueSettings } from '../../jobs/redis-connection.js';
import { createRemovalQueue } from '../../jobs/removals/queue-handle.js';
import { recentOutcomesByHost } from '../../jobs/removals/failed.js';
import { countUnbound, openUnboundQueue, unboundTotal } from '../../jobs/removals/unbound.js';
import { databaseFileSizes, freePageBytes, MirrorDbError, openMirror, type Db } from '../../db/open.js';
import { auditLocation, openAudit } from '../../db/open-audit.js';
import { readWalIndex } from '../../db/wal-index.js';
import { removalCountsByStatus } from '../../db/removal-audit.js';
import { checkAuditLocation } from '../runtime/audit-location-check.js';
import { MirrorReader } from '../../db/mirror-reader.js';
import { type ManagementTarget } from '../../jobs/removals/contract.js';
import { syncQueueName } from '../../jobs/sync/contract.js';
import { webhookTarget, type WebhookTarget } from '../../jobs/webhooks/contract.js';
import { ChangeFeed, openChangeFeed } from '../../db/change-feed.js';
import { decideRemovalGate, type DurabilityVerdict, readEstateDurability } from '../../jobs/redis-durability.js';
import { mirrorFigures, staleAfterMs } from '../health/staleness.js';
import { intervalOfExpression } from '../health/schedule-interval.js';
import { currentBackupVerdict } from '../health/backup-folder.js';
import { currentExportVerdict } from '../health/export-verdict.js';
import { settleWithin } from '../runtime/deadline.js';
import { errorMessage } from '../runtime/line-text.js';
import { buildStatusReport, statusExitCode } from '../health/status-report.js';
import type { FeedFacts, MirrorFacts, QueueCounts, QueueFacts, StatusFacts, SyncJobFacts } from '../health/status-facts.js';
import { restoreFilesBeside } from '../health/restore-files.js';
import { pidAlive } from '../../db/sync-lease.js';
import { readNewestRestore } from '../../db/lineage.js';
import { formatStatusReport } from '../health/status-text.js';
import { attemptRecordPath, readAttemptRecord } from '../sync/attempt-record.js';
import { diskSpace } from '../../db/disk-space.js';
import { diskVerdict, type DiskVerdict } from '../health/disk-verdict.js';
import { newestRunFindings } from '../../db/run-findings.js';
import { newestRunDrift } from '../../db/schema-drift.js';
import { whyNotWritable } from '../runtime/writable-file.js';
import { urlTarget } from '../../jobs/url-target.js';
import { AUDIT_LOCATION_ENV } from '../../db/audit-location.js';
import { createWebhookQueue } from '../../jobs/webhooks/queue-handle.js';
import { readDispatched, readEndpointFailure, readRetrying, readSettled } from '../../jobs/webhooks/delivery-state.js';
import type { SinkStatus, WebhookQueues } from '../sinks/sink-status.js';
import { sinksOf, type SinkSettings } from '../sinks/sinks-file.js';

const Args = z.object({
  json: z.boolean().default(false),
  positionals: z.array(z.string()).max(0, 'takes no arguments'),
});

const RUNS_SHOWN = 5;
const REDIS_BUDGET_MS = 3_000;

export default async function status(argv: string[]): Promise<number> {
  const args = parseCommandArgs(argv, { json: { type: 'boolean' } }, Args);
  // One pass: every problem at once. MANAGEMENT_URL only when given (a sync-only estate has none; the removal queue is then not shown).
  const pass = new ConfigPass([
    'MIRROR_DB',
    'AUDIT_DB',
    'MIRROR_ID',
    'SYNC_CRON',
    'SYNC_STALE_AFTER_MS',
    'MIRROR_WAL_WARN_BYTES',
    'MIRROR_DISK_WARN_BYTES',
    'MIRROR_CHECKPOINTS',
    ...QUEUE_ENV,
    'ALLOW_VOLATILE_REDIS',
    'WEBHOOK_URL',
    'BACKUP_DIR',
    'BACKUP_CRON',
    'EXPORT_DIR',
    'EXPORT_CRON',
    'WEBHOOK_LAG_WARN_SECONDS',
    'SINKS_FILE',
    'TLS_BY_PROXY',
    ...(isGiven('MANAGEMENT_URL') ? (['MANAGEMENT_URL'] as const) : []),
  ]);
  pass.check(QUEUE_ENV, queueSettingsFromConfig);
  pass.check(AUDIT_LOCATION_ENV, checkAuditLocation);
  const sinkList = pass.check(['SINKS_FILE'], (c) => sinksOf(c)) ?? [];
  const config = pass.done();
  const settings = queueSettingsFromConfig(config);
  const target = config.MANAGEMENT_URL === undefined ? undefined : urlTarget(config.MANAGEMENT_URL);
  const hook = config.WEBHOOK_URL === undefined ? undefined : webhookTarget(config.WEBHOOK_URL);
  const auditPath = auditLocation(config);

  const [{ mirror, misconfigured }, { queues, durability }] = await Promise.all([
    Promise.resolve().then(() => readMirror(config.MIRROR_DB, auditPath)),
    readQueues(settings, config.MIRROR_ID, target, hook),
  ]);
  const feed = mirror.available ? withOldestUnsettled(config.MIRROR_DB, mirror.feed, queues) : null;
  const intervalMs = intervalOfExpression(config.SYNC_CRON);
  const report = buildStatusReport({
    mirrorPath: config.MIRROR_DB,
    mirrorId: config.MIRROR_ID,
    now: new Date(),
    scheduleIntervalMs: intervalMs,
    staleAfterMs: staleAfterMs(config.SYNC_STALE_AFTER_MS, intervalMs),
    mirror,
    queues,
    removalGate: durability === undefined ? undefined : decideRemovalGate(durability, config.ALLOW_VOLATILE_REDIS),
    removalsConfigured: target !== undefined,
    feed,
    webhooksConfigured: hook !== undefined,
    webhookLagWarnSeconds: config.WEBHOOK_LAG_WARN_SECONDS,
    audit: { path: auditPath, exists: existsSync(auditPath), problem: whyNotWritable(auditPath) },
    walWarnBytes: config.MIRROR_WAL_WARN_BYTES,
    disk: diskOf(config.MIRROR_DB, config.MIRROR_DISK_WARN_BYTES),
    checkpoints: config.MIRROR_CHECKPOINTS,
    recordBeside: recordBeside(config.MIRROR_DB),
    restoreFiles: restoreFilesOf(config.MIRROR_DB),
    backups:
      config.BACKUP_DIR === undefined
        ? undefined
        : { dir: config.BACKUP_DIR, cron: config.BACKUP_CRON, ...currentBackupVerdict(config.BACKUP_DIR, config.BACKUP_CRON) },
    exports:
      config.EXPORT_DIR === undefined
        ? undefined
        : { dir: config.EXPORT_DIR, cron: config.EXPORT_CRON, ...currentExportVerdict(config.EXPORT_DIR, config.EXPORT_CRON) },
  });
  // Each sink's line (src/sinks/sink-status.ts): its destination asked for its position; one failing makes the exit 1.
  const sinks = await readSinks(config.MIRROR_DB, sinkList, config.WEBHOOK_LAG_WARN_SECONDS, {
    ...settings,
    mirrorId: config.MIRROR_ID,
  });
  process.stdout.write(
    args.json
      ? `${JSON.stringify(sinkList.length === 0 ? report : { ...report, sinks: sinks.map((s) => s.status) }, null, 2)}\n`
      : formatStatusReport(report) + sinks.map((s) => `${s.line}\n`).join(''),
  );
  if (misconfigured) return 2;
  return sinks.some((s) => s.status.problem !== null) ? 1 : statusExitCode(report);
}

/** Each sink's status and its line; the sink clients (ioredis, NATS) load only where SINKS_FILE names sinks. */
async function readSinks(
  mirrorDb: string,
  sinks: readonly SinkSettings[],
  lagWarnSeconds: number,
  webhooks: WebhookQueues,
): Promise<Array<{ status: SinkStatus; line: string }>> {
  if (sinks.length === 0) return [];
  const { formatSinkStatus, readSinkStatus } = await import('../sinks/sink-status.js');
  let db: Db | undefined;
  try {
    db = openMirror(mirrorDb, { readonly: true });
  } catch {
    db = undefined;
  }
  try {
    const feed = db === undefined ? undefined : openChangeFeed(db);
    const rows = await Promise.all(sinks.map((s) => readSinkStatus(feed, s, lagWarnSeconds, new Date(), webhooks)));
    return rows.map((status) => ({ status, line: formatSinkStatus(status) }));
  } finally {
    db?.close();
  }
}

/** The file system holding the mirror, judged; undefined for an in-memory mirror or a folder that is not there. */
function diskOf(path: string, warnBytes: number): DiskVerdict | undefined {
  const space = path === ':memory:' ? undefined : diskSpace(path);
  return space === undefined ? undefined : diskVerdict(space, warnBytes);
}

/** What restores left beside the mirror, each killed restore's copy with whether its pid still runs. */
function restoreFilesOf(path: string): StatusFacts['restoreFiles'] {
  if (path === ':memory:') return undefined;
  const found = restoreFilesBeside(path);
  return { leftovers: found.leftovers.map((l) => ({ ...l, running: pidAlive(l.pid) })), replaced: found.replaced };
}

/** The record kept beside the mirror; one that cannot be read is itself reported as a failure. */
function recordBeside(path: string): StatusFacts['recordBeside'] {
  try {
    return readAttemptRecord(path);
  } catch (err) {
    return { at: new Date().toISOString(), what: 'sync', reason: `could not read ${attemptRecordPath(path)}: ${String(err)}` };
  }
}

/** The mirror's facts; `misconfigured` when MIRROR_DB names something that cannot be a mirror at all. */
function readMirror(path: string, auditPath: string): { mirror: MirrorFacts; misconfigured: boolean } {
  try {
    return { mirror: readMirrorFacts(path, auditPath), misconfigured: false };
  } catch (err) {
    if (!(err instanceof MirrorDbError)) throw err;
    return { mirror: { available: false, error: err.problems.join('; ') }, misconfigured: true };
  }
}

function readMirrorFacts(path: string, auditPath: string): MirrorFacts {
  if (path !== ':memory:' && !existsSync(path)) return { available: false, error: 'no mirror database at this path' };
  let db: Db | undefined;
  try {
    db = openMirror(path, { readonly: true, readWhenFull: true });
    const reader = new MirrorReader(db);
    const figures = mirrorFigures(reader);
    return {
      available: true,
      activeUsers: figures.activeUsers,
      deletedUsers: figures.deletedUsers,
      lastSucceededAt: figures.lastSucceededAt,
      lastProblem: figures.lastProblem,
      running: figures.running,
      sourceAt: figures.sourceAt,
      lastRuns: reader.lastRuns(RUNS_SHOWN).map((r) => ({
        id: r.id,
        status: r.status,
        startedAt: r.startedAt,
        finishedAt: r.finishedAt,
        usersSeen: r.usersSeen,
        created: r.created,
        updated: r.updated,
        deleted: r.deleted,
        candidates: r.candidates,
        anomalies: r.anomalies,
        totalAtStart: r.totalAtStart,
        error: r.error,
      })),
      failedRemovalsInAudit: failedInAudit(auditPath),
      fieldWarnings: reader.fieldWarningStats(),
      findings: newestRunFindings(db),
      schemaDrift: newestRunDrift(db),
      feed: feedOf(db),
      restore: readNewestRestore(db),
      files: path === ':memory:' ? undefined : { ...databaseFileSizes(path), freeBytes: freePageBytes(db), walIndex: readWalIndex(path) },
    };
  } catch (err) {
    if (err instanceof MirrorDbError) throw err;
    return { available: false, error: errorMessage(err) };
  } finally {
    db?.close();
  }
}

/** Failed removals in the audit file (AUDIT_DB); undefined when there is none (yet) or it cannot be read. */
function failedInAudit(path: string): number | undefined {
  if (!existsSync(path)) return undefined;
  let db: Db | undefined;
  try {
    db = openAudit(path, { readonly: true });
    const counts = removalCountsByStatus(db);
    return counts === undefined ? undefined : (counts.failed ?? 0);
  } catch {
    return undefined;
  } finally {
    db?.close();
  }
}

/** The feed's extent, or null for a mirror written before the feed. */
function feedOf(db: Db): FeedFacts | null {
  const b = openChangeFeed(db)?.bounds();
  if (b === undefined) return null;
  return { latest: b.latest, oldest: b.oldest, prunedThrough: b.prunedThrough };
}

/** When the first event the webhook has not settled was published: how far behind delivery is, in time. */
function withOldestUnsettled(path: string, feed: FeedFacts | null | undefined, queues: QueueFacts): FeedFacts | null {
  if (feed === null || feed === undefined) return null;
  const settled = queues.reachable ? queues.webhooks?.settled : undefined;
  if (settled === undefined || settled >= feed.latest) return feed;
  let db: Db | undefined;
  try {
    db = openMirror(path, { readonly: true, readWhenFull: true });
    return { ...feed, oldestUnsettledAt: new ChangeFeed(db).publishedAfter(Math.max(settled, feed.prunedThrough)) };
  } catch {
    return feed;
  } finally {
    db?.close();
  }
}

/** The newest finished (completed or failed) job of the daemon's sync queue, or null. */
async function newestFinishedJob(sync: Queue): Promise<SyncJobFacts | null> {
  const [failed, completed] = await Promise.all([sync.getJobs(['failed'], 0, 0, false), sync.getJobs(['completed'], 0, 0, false)]);
  const newest = [...failed, ...completed]
    .filter((j) => j.finishedOn !== undefined)
    .sort((a, b) => (b.finishedOn ?? 0) - (a.finishedOn ?? 0))[0];
  if (newest === undefined) return null;
  const wasFailed = failed.includes(newest);
  return {
    finishedAt: new Date(newest.finishedOn ?? 0).toISOString(),
    failedReason: wasFailed ? newest.failedReason || 'unknown reason' : null,
  };
}

async function readQueues(
  { endpoint, prefix }: QueueSettings,
  mirrorId: string,
  target: ManagementTarget | undefined,
  hook: WebhookTarget | undefined,
): Promise<{ queues: QueueFacts; durability: DurabilityVerdict | undefined }> {
  // A status command reports an outage, it does not wait it out: one attempt, and a budget below.
  const redis = createRedisConnection(endpoint, { role: 'probe', connectionName: 'user-mirror:status' });
  let lastError = 'timed out';
  redis.on('error', (err: Error) => {
    lastError = err.message;
  });
  const queues: Queue[] = [];
  let facts: QueueFacts = { reachable: false, error: lastError };
  let durability: DurabilityVerdict | undefined;
  const work = (async () => {
    await redisReady(redis, REDIS_BUDGET_MS);
    // A look leaves Redis as it was: no queue writes its meta key (test/read-only-redis.test.ts).
    const sync = new Queue(syncQueueName(mirrorId), { connection: redis, prefix, skipMetasUpdate: true });
    const unbound = openUnboundQueue(redis, prefix, true);
    const removals = target === undefined ? undefined : createRemovalQueue(redis, { target, prefix, readOnly: true });
    const webhooks = hook === undefined ? undefined : createWebhookQueue(redis, { mirrorId, target: hook, prefix, readOnly: true });
    queues.push(sync, unbound, ...(removals === undefined ? [] : [removals]), ...(webhooks === undefined ? [] : [webhooks]));
    for (const q of queues) q.on('error', () => undefined);
    const [s, u, r, hosts, d, w, lastSyncJob] = await Promise.all([
      counts(sync),
      countUnbound(unbound),
      removals === undefined ? undefined : counts(removals),
      removals === undefined ? [] : recentOutcomesByHost(removals),
      readEstateDurability(redis),
      webhooks === undefined
        ? undefined
        : Promise.all([
            counts(webhooks),
            readDispatched(webhooks),
            readSettled(webhooks),
            readEndpointFailure(webhooks),
            readRetrying(webhooks),
          ]),
      newestFinishedJob(sync),
    ]);
    facts = {
      reachable: true,
      sync: s,
      lastSyncJob,
      unboundRemovals: unboundTotal(u),
      removals:
        removals === undefined || r === undefined || target === undefined
          ? null
          : { target: { id: target.id, url: target.url, queue: removals.name }, counts: r, hosts },
      webhooks:
        webhooks === undefined || w === undefined || hook === undefined
          ? null
          : {
              target: { id: hook.id, url: hook.url, queue: webhooks.name },
              counts: w[0],
              dispatched: w[1],
              settled: w[2],
              endpoint: w[3],
              retrying: w[4],
            },
    };
    durability = d;
  })().catch((err: unknown) => {
    // The connection's own error (ECONNREFUSED, auth) says more than the "Connection is closed." that follows it.
    facts = { reachable: false, error: lastError !== 'timed out' ? lastError : errorMessage(err) };
  });
  if (!(await settleWithin(work, REDIS_BUDGET_MS + 1_000))) facts = { reachable: false, error: `no answer within ${REDIS_BUDGET_MS} ms` };
  await settleWithin(Promise.all(queues.map((q) => q.close())), 1_000);
  // Disconnecting an ended connection still arms ioredis's 2 s stream timer, which would hold the exit.
  if (redis.status !== 'end') redis.disconnect();
  return { queues: facts, durability: facts.reachable ? durability : undefined };
}

async function counts(queue: Queue): Promise<QueueCounts> {
  const c = await queue.getJobCounts('wait', 'prioritized', 'active', 'delayed', 'failed', 'completed');
  return {
    waiting: (c.wait ?? 0) + (c.prioritized ?? 0),
    active: c.active ?? 0,
    delayed: c.delayed ?? 0,
    failed: c.failed ?? 0,
    completed: c.completed ?? 0,
  };
}
