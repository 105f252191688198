/**
 * Waiting for the daemon's control connection (jobs/redis-connection.ts,
 * role `control`) before the workers start: the daemon outlives Redis
 * outages, so it keeps trying instead of exiting; then its reading of
 * Redis's durability, asked again until it answers.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { logError, RepeatThrottle } from '../runtime/log-error.js';
import {
  RedisUnavailableError,
  reconnectDelay,
  redisFailureOf,
  redisReady,
  type RedisClient,
  type RedisFailure,
} from '../../jobs/redis-connection.js';
import { errorMessage } from '../runtime/line-text.js';
import { decideRemovalGate, logRemovalGate, readEstateDurability, type RemovalGate } from '../../jobs/redis-durability.js';
import { retryWhileBusy } from '../../db/busy-retry.js';
import type { Db } from '../../db/open.js';
import type { Logger } from 'pino';

/**
 * The removal gate (jobs/redis-durability.ts), read once Redis answers; undefined when stopped first. Redis may drop
 * between the PING and INFO: wait and ask again. Logged as the removal worker's verdict only when `removals` are on:
 * a daemon without them still reads it (webhooks follow it, /metrics shows it) but has no removals to hold.
 */
export async function readRemovalGate(
  redis: RedisClient,
  allowVolatile: boolean,
  options: { logger: Logger; where: string; signal: AbortSignal; removals: boolean },
): Promise<RemovalGate | undefined> {
  for (;;) {
    try {
      const gate = decideRemovalGate(await readEstateDurability(redis), allowVolatile);
      if (options.removals) logRemovalGate(gate, options.logger);
      return gate;
    } catch (err) {
      logError(options.logger, 'warn', { event: 'removals.redis_durability_unread', err }, 'could not read redis settings; retrying');
      const pause = sleep(1_000, undefined, { signal: options.signal }).then(
        () => true,
        () => false,
      );
      if (!(await pause) || !(await waitForRedis(redis, options))) return undefined;
    }
  }
}

/**
 * Resolves true once Redis answers PING; false if `signal` aborts first (shutdown during start-up).
 * Every connection role (the daemon's control, a worker's) waits here: the wait is for the
 * connection's `ready`, so a worker connection's PING never sits in its offline queue for ever, and
 * each line it logs (throttled) names the cause: unreachable, refused credentials, or no answer.
 */
export async function waitForRedis(redis: RedisClient, options: { logger: Logger; where: string; signal: AbortSignal }): Promise<boolean> {
  const where = options.where;
  const throttle = new RepeatThrottle(30_000);
  const started = Date.now();
  for (let attempt = 1; !options.signal.aborted; attempt++) {
    try {
      await untilAborted(redisReady(redis, reconnectDelay(attempt) + 1_000), options.signal);
      await redis.ping();
      if (attempt > 1) options.logger.info({ event: 'redis.ready', redis: where, waitedMs: Date.now() - started }, 'redis is reachable');
      return true;
    } catch (err) {
      if (options.signal.aborted) return false;
      const failure = err instanceof RedisUnavailableError ? err.failure : redisFailureOf(errorMessage(err));
      if (throttle.hit('ping').log) {
        logError(
          options.logger,
          'warn',
          { event: 'redis.waiting', redis: where, failure, attempt, waitedMs: Date.now() - started, err },
          `waiting for redis before starting the workers: ${FAILURE_SAID[failure]}`,
        );
      }
    }
    try {
      await sleep(reconnectDelay(attempt), undefined, { signal: options.signal });
    } catch {
      return false;
    }
  }
  return false;
}

const FAILURE_SAID: Record<RedisFailure, string> = {
  unreachable: 'redis is unreachable',
  refused: 'redis refuses the credentials',
  'timed out': 'redis does not answer',
};

/** `promise`, or a rejection as soon as `signal` aborts (what it waited on goes on, bounded, in the background). */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(new Error('aborted'));
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(new Error('aborted'));
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** Longer than a first sync of a large directory is expected to hold the mirror. */
const OPEN_WAIT_BUDGET_MS = 15 * 60_000;

/**
 * Opens the daemon's database files at start-up, waiting while another
 * process holds a write lock the open needs.
 *
 * Opening usually needs no lock, but it takes one to migrate (a new file, an
 * upgrade) or to import an older audit. Another process's sync holds the
 * mirror's write lock for its whole run, which on a large first sync is
 * minutes: a start that needs the lock then fails with SQLITE_BUSY after the
 * connection's busy timeout. Exiting would only have pm2 start the daemon
 * again into the same wait, so the daemon waits here instead (the status
 * server is not up yet, so it is not ready), and says so in the log.
 */
export function openWhenUnlocked(file: 'mirror' | 'audit', open: () => Db, logger: Logger): Promise<Db> {
  return retryWhileBusy(async () => open(), {
    budgetMs: OPEN_WAIT_BUDGET_MS,
    firstDelayMs: 200,
    maxDelayMs: 5_000,
    onRetry: ({ attempt, delayMs }) =>
      logger.warn(
        { event: 'daemon.db_locked_at_start', file, attempt, retryInMs: delayMs },
        `the ${file} file is write-locked by another process (a sync running elsewhere?); waiting to open it`,
      ),
  });
}
