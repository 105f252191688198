/**
 * `user-mirror worker removals`: runs the member-removal worker on its own.
 *
 * Needs Redis (REDIS_URL, or REDIS_CLUSTER_NODES, or REDIS_SENTINELS), MANAGEMENT_URL
 * and MANAGEMENT_KEY; takes jobs from MANAGEMENT_URL's queue only (jobs/removals/contract.ts);
 * writes the audit to
 * AUDIT_DB (default: next to MIRROR_DB, see db/audit-location.ts).
 * Takes no job from a Redis that can lose it (AOF off, or an eviction policy
 * other than noeviction): exits 2 with the reason and the fix, unless
 * ALLOW_VOLATILE_REDIS=1 (see jobs/redis-durability.ts).
 * SIGINT/SIGTERM stop fetching, wait up to SHUTDOWN_TIMEOUT_MS for removals
 * in flight, then exit 0. A second signal exits at once; whatever was in
 * flight is recovered by the next worker as a stalled job.
 */
import { z } from 'zod';
import { parseCommandArgs } from './args.js';
import { createLogger, humanLog } from '../runtime/log.js';
import { auditLocation, openAudit } from '../../db/open-audit.js';
import { checkAuditLocation } from '../runtime/audit-location-check.js';
import { createRemovalAudit } from '../../db/removal-audit.js';
import { type RedisClient, createRedisConnection, describeRedis, readWithQueueSettings } from '../../jobs/redis-connection.js';
import { MANAGEMENT_CLIENT_ENV, managementClientFromConfig } from '../service/client-from-config.js';
import { startRemovalWorker } from '../../jobs/removals/worker.js';
import { removalQueueName } from '../../jobs/removals/contract.js';
import { logUnbound, openUnboundQueue } from '../../jobs/removals/unbound.js';
import { checkRemovalGate, describeRemovalGate } from '../../jobs/redis-durability.js';
import { urlTarget } from '../../jobs/url-target.js';
import { AUDIT_LOCATION_ENV } from '../../db/audit-location.js';
import { waitForRedis } from '../daemon/startup-waits.js';
import type { Logger } from 'pino';

const Args = z.object({
  positionals: z.tuple([z.literal('removals', { error: "must be 'removals' (the only worker there is)" })], {
    error: 'expected exactly one argument: removals',
  }),
});

export default async function main(argv: string[]): Promise<number> {
  parseCommandArgs(argv, {}, Args);
  const {
    config,
    queue: { endpoint, prefix },
  } = readWithQueueSettings(
    [
      ...MANAGEMENT_CLIENT_ENV,
      'ALLOW_VOLATILE_REDIS',
      'MIRROR_DB',
      'AUDIT_DB',
      'REMOVAL_CONCURRENCY',
      'REMOVAL_BACKOFF_MS',
      'REMOVAL_LOCK_MS',
      'SHUTDOWN_TIMEOUT_MS',
      'LOG_LEVEL',
    ],
    process.env,
    (pass) => pass.check(AUDIT_LOCATION_ENV, checkAuditLocation),
  );
  const target = urlTarget(config.MANAGEMENT_URL);
  // A person at a terminal reads sentences; pm2 and log shippers get JSON lines.
  const logger = createLogger(config, process.stdout.isTTY === true ? humanLog(process.stdout) : process.stdout);
  const db = openAudit(auditLocation(config), { legacyMirror: config.MIRROR_DB });
  const redis = createRedisConnection(endpoint, { role: 'worker', logger, connectionName: 'user-mirror:removal-worker' });
  const stopped = new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGINT', () => resolve('SIGINT'));
    process.once('SIGTERM', () => resolve('SIGTERM'));
  });
  // Long-running by design, so it waits for Redis, or for a signal; but it says why it waits (unreachable,
  // refused credentials, no answer), as the daemon does, instead of hanging silently.
  const aborted = new AbortController();
  void stopped.then(() => aborted.abort());
  const reachable = await waitForRedis(redis, { logger, where: describeRedis(endpoint), signal: aborted.signal });
  const gate = reachable ? await Promise.race([checkRemovalGate(redis, config.ALLOW_VOLATILE_REDIS, logger), stopped]) : 'stopped';
  if (typeof gate === 'string' || gate.state === 'held') {
    redis.disconnect();
    db.close();
    if (typeof gate === 'string') return 0;
    process.stderr.write(`user-mirror worker: refusing to take removal jobs: ${describeRemovalGate(gate)}\n`);
    return 2;
  }
  const client = managementClientFromConfig(config, config.REMOVAL_CONCURRENCY);

  const handle = startRemovalWorker({
    connection: redis,
    target,
    prefix,
    client,
    audit: createRemovalAudit(db),
    logger,
    concurrency: config.REMOVAL_CONCURRENCY,
    backoffMs: config.REMOVAL_BACKOFF_MS,
    lockDurationMs: config.REMOVAL_LOCK_MS,
  });

  await Promise.race([handle.waitUntilReady(), stopped]);
  logger.info(
    {
      queue: `${prefix}:${removalQueueName(target.id)}`,
      target: target.id,
      managementUrl: target.url,
      redis: describeRedis(endpoint),
      concurrency: config.REMOVAL_CONCURRENCY,
      lockMs: config.REMOVAL_LOCK_MS,
      volatileRedisAllowed: gate.volatileAllowed,
    },
    'removal worker started',
  );
  await reportUnbound(redis, prefix, logger);

  const signal = await stopped;
  const again = (): void => {
    logger.warn('second signal: exiting without waiting for removals in flight');
    process.exit(1);
  };
  process.once('SIGINT', again);
  process.once('SIGTERM', again);
  logger.info({ signal, timeoutMs: config.SHUTDOWN_TIMEOUT_MS }, 'shutting down: waiting for removals in flight');

  const { drained } = await handle.close(config.SHUTDOWN_TIMEOUT_MS);
  // Undici's close waits for requests in flight; after a timed-out drain those are abandoned (their jobs will be recovered).
  if (drained) await client.close().catch(() => undefined);
  redis.disconnect();
  db.close();
  logger.info({ drained, ...handle.counters() }, 'removal worker stopped');
  // Abandoned requests and BullMQ's background close would keep the process alive; they must not.
  setTimeout(() => process.exit(0), drained ? 1_000 : 50).unref();
  return 0;
}

/** Jobs of an older producer that no worker takes: said at start-up, loudly (jobs/removals/unbound.ts). */
async function reportUnbound(redis: RedisClient, prefix: string, logger: Logger): Promise<void> {
  const queue = openUnboundQueue(redis, prefix);
  try {
    await logUnbound(queue, logger);
  } finally {
    await queue.close().catch(() => undefined);
  }
}
