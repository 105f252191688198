/**
 * `user-mirror status [--json]`: last sync runs, mirror size and age, queue
 * depths (sync and removals), failed removals, and whether Redis keeps
 * queued removals (AOF, eviction policy; held unless ALLOW_VOLATILE_REDIS=1). Human-readable by
 * default; `--json` prints the same report as one JSON object.
 *
 * Works without the daemon, and without Redis: the mirror part comes from
 * the SQLite file (opened read-only), and an unreachable Redis is reported
 * as such rather than waited for.
 *
 * Exit codes (the report is printed in every case but usage errors):
 *   0  all well: the mirror is readable and fresh, Redis answers;
 *   1  needs attention: the mirror is stale (no succeeded sync within
 *      SYNC_STALE_AFTER_MS) or unreadable, or Redis is unreachable;
 *   2  usage or configuration error, MIRROR_DB naming something that cannot
 *      be a mirror (a directory, a device, not a SQLite file) included.
 */
import { existsSync } from 'node:fs';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { z } from 'zod';
import { parseCommandArgs } from '../cli-args.js';
import { readConfig } from '../config.js';
import { MirrorDbError, openMirror, type Db } from '../../db/open.js';
import { openAudit } from '../../db/open-audit.js';
import { auditLocation } from '../audit-location.js';
import { MirrorReader } from '../../db/mirror-reader.js';
import { REMOVAL_QUEUE } from '../../jobs/removal-queue.js';
import { syncQueueName } from '../../jobs/sync-queue.js';
import { decideRemovalGate, judgeRedisDurability, type RedisDurabilityFacts } from '../../jobs/redis-durability.js';
import { readRedisDurability } from '../../jobs/redis-durability-probe.js';
import { mirrorFigures } from '../daemon/mirror-age.js';
import { intervalOfExpression } from '../daemon/schedule.js';
import { settleWithin } from '../../jobs/settle-within.js';
import { staleAfterMs } from '../daemon/staleness.js';
import {
  buildStatusReport,
  formatStatusReport,
  statusExitCode,
  type MirrorFacts,
  type QueueCounts,
  type QueueFacts,
} from '../daemon/status-report.js';

const Args = z.object({
  json: z.boolean().default(false),
  positionals: z.array(z.string()).max(0, 'takes no arguments'),
});

const RUNS_SHOWN = 5;
const REDIS_BUDGET_MS = 3_000;

export default async function status(argv: string[]): Promise<number> {
  const args = parseCommandArgs(argv, { json: { type: 'boolean' } }, Args);
  const config = readConfig(['MIRROR_DB', 'AUDIT_DB', 'MIRROR_ID', 'SYNC_CRON', 'SYNC_STALE_AFTER_MS', 'REDIS_URL', 'QUEUE_PREFIX', 'ALLOW_VOLATILE_REDIS']);
  const auditPath = auditLocation(config);

  const [{ mirror, misconfigured }, { queues, durability }] = await Promise.all([
    Promise.resolve().then(() => readMirror(config.MIRROR_DB, auditPath)),
    readQueues(config.REDIS_URL, config.QUEUE_PREFIX, config.MIRROR_ID),
  ]);
  const intervalMs = intervalOfExpression(config.SYNC_CRON);
  const report = buildStatusReport({
    mirrorPath: config.MIRROR_DB,
    mirrorId: config.MIRROR_ID,
    now: new Date(),
    scheduleIntervalMs: intervalMs,
    staleAfterMs: staleAfterMs(config.SYNC_STALE_AFTER_MS, intervalMs),
    mirror,
    queues,
    removalGate: durability === undefined ? undefined : decideRemovalGate(judgeRedisDurability(durability), config.ALLOW_VOLATILE_REDIS),
  });
  process.stdout.write(args.json ? `${JSON.stringify(report, null, 2)}\n` : formatStatusReport(report));
  return misconfigured ? 2 : statusExitCode(report);
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
    db = openMirror(path, { readonly: true });
    const reader = new MirrorReader(db);
    const figures = mirrorFigures(reader);
    return {
      available: true,
      activeUsers: figures.activeUsers,
      deletedUsers: figures.deletedUsers,
      lastSucceededAt: figures.lastSucceededAt,
      lastProblem: figures.lastProblem,
      running: figures.running,
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
        error: r.error,
      })),
      failedRemovalsInAudit: failedInAudit(auditPath),
      fieldWarnings: reader.fieldWarningStats(),
    };
  } catch (err) {
    if (err instanceof MirrorDbError) throw err;
    return { available: false, error: err instanceof Error ? err.message : String(err) };
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
    const table = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'member_removals'").get();
    if (table === undefined) return undefined;
    return db.prepare<[], { n: number }>("SELECT count(*) AS n FROM member_removals WHERE status = 'failed'").get()?.n ?? 0;
  } catch {
    return undefined;
  } finally {
    db?.close();
  }
}

async function readQueues(
  url: string,
  prefix: string,
  mirrorId: string,
): Promise<{ queues: QueueFacts; durability: RedisDurabilityFacts | undefined }> {
  // One connection attempt, no reconnects: a status command reports an outage, it does not wait it out.
  const redis = new Redis(url, {
    lazyConnect: true,
    connectTimeout: 2_000,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectionName: 'user-mirror:status',
  });
  let lastError = 'timed out';
  redis.on('error', (err: Error) => {
    lastError = err.message;
  });
  const queues: Queue[] = [];
  let facts: QueueFacts = { reachable: false, error: lastError };
  let durability: RedisDurabilityFacts | undefined;
  const work = (async () => {
    // Connected before BullMQ sees it: given a client that has not connected yet, BullMQ connects it itself.
    await redis.connect();
    const sync = new Queue(syncQueueName(mirrorId), { connection: redis, prefix });
    const removals = new Queue(REMOVAL_QUEUE, { connection: redis, prefix });
    queues.push(sync, removals);
    for (const q of queues) q.on('error', () => undefined);
    const [s, r, d] = await Promise.all([counts(sync), counts(removals), readRedisDurability(redis)]);
    facts = { reachable: true, sync: s, removals: r };
    durability = d;
  })().catch((err: unknown) => {
    // The connection's own error (ECONNREFUSED, auth) says more than the "Connection is closed." that follows it.
    facts = { reachable: false, error: lastError !== 'timed out' ? lastError : err instanceof Error ? err.message : String(err) };
  });
  if (!(await settleWithin(work, REDIS_BUDGET_MS))) facts = { reachable: false, error: `no answer within ${REDIS_BUDGET_MS} ms` };
  await settleWithin(Promise.all(queues.map((q) => q.close())), 1_000);
  redis.disconnect();
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
