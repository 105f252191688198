/**
 * The daemon's non-blocking Redis connection: it adds sync jobs, answers
 * readiness probes and reads queue depths. (Workers get their own blocking
 * connections from jobs/redis-connection.ts.)
 *
 * It reconnects forever, because the daemon outlives Redis outages (the
 * `producer` role of redis-connection.ts gives up after about 15 s, which
 * suits a CLI, not a process that runs for months). And it fails commands at
 * once while disconnected (no offline queue), so that during an outage a
 * tick, a scrape or a probe gets an error now instead of a command that waits
 * and then fires late, when Redis is back: a stale tick would enqueue a sync
 * nobody asked for any more.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import type { Logger } from '../log.js';
import { describeRedisUrl, reconnectDelay } from '../../jobs/redis-connection.js';
import { RepeatThrottle } from './repeat-throttle.js';

export function createControlConnection(url: string, logger: Logger): Redis {
  const redis = new Redis(url, {
    connectionName: 'user-mirror:daemon-control',
    connectTimeout: 10_000,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    retryStrategy: (times) => reconnectDelay(times),
  });
  const where = describeRedisUrl(url);
  let down = false;
  redis.on('error', (err: Error) => {
    if (down) return;
    down = true;
    logger.warn({ event: 'redis.down', redis: where, err: err.message }, 'redis unreachable; reconnecting');
  });
  redis.on('ready', () => {
    if (!down) return;
    down = false;
    logger.info({ event: 'redis.up', redis: where }, 'redis reachable again');
  });
  return redis;
}

/** Resolves true once Redis answers PING; false if `signal` aborts first (shutdown during start-up). */
export async function waitForRedis(redis: Redis, options: { logger: Logger; url: string; signal: AbortSignal }): Promise<boolean> {
  const where = describeRedisUrl(options.url);
  const throttle = new RepeatThrottle(30_000);
  const started = Date.now();
  for (let attempt = 1; !options.signal.aborted; attempt++) {
    // Without an offline queue a PING before the first connect fails at once; give the connect its chance.
    await connected(redis, reconnectDelay(attempt) + 1_000, options.signal);
    try {
      await redis.ping();
      if (attempt > 1) options.logger.info({ event: 'redis.ready', redis: where, waitedMs: Date.now() - started }, 'redis is reachable');
      return true;
    } catch (err) {
      if (throttle.hit('ping').log) {
        options.logger.warn(
          { event: 'redis.waiting', redis: where, attempt, waitedMs: Date.now() - started, err: err instanceof Error ? err.message : String(err) },
          'waiting for redis before starting the workers',
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

function connected(redis: Redis, ms: number, signal: AbortSignal): Promise<void> {
  if (redis.status === 'ready') return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      redis.off('ready', done);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    redis.once('ready', done);
    signal.addEventListener('abort', done, { once: true });
  });
}
