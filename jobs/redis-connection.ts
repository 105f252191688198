/**
 * ioredis connections for the removal queue.
 *
 * - `worker`: `maxRetriesPerRequest: null` (BullMQ requires it for blocking
 *   commands) and reconnects forever: a worker outlives Redis restarts.
 * - `producer`: gives up on a command after a few reconnects, so a CLI or an
 *   HTTP handler enqueueing while Redis is down gets an error instead of
 *   hanging.
 * - `control`: the daemon's own non-blocking connection (ticks, probes,
 *   scrapes). It reconnects forever, like a worker, but fails commands at
 *   once while disconnected (no offline queue): a tick or a probe during an
 *   outage gets an error now, not a command that fires late when Redis is
 *   back.
 *
 * Reconnects back off exponentially with jitter. The URL is logged only as
 * `redis://host:port/db`: its user name and password never reach a log.
 */
import { Redis, type RedisOptions } from 'ioredis';
import type { Logger } from '../src/log.js';

export type RedisRole = 'worker' | 'producer' | 'control';

export interface RedisConnectionOptions {
  role: RedisRole;
  logger?: Logger;
  /** Shown in `CLIENT LIST`, handy when several processes share a Redis. */
  connectionName?: string;
}

/** Reconnect delays: 100 ms doubling to 5 s, with jitter so a fleet does not reconnect in lockstep. */
export function reconnectDelay(times: number, random: () => number = Math.random): number {
  const exp = Math.min(5_000, 100 * 2 ** Math.max(0, times - 1));
  return Math.round(exp / 2 + random() * (exp / 2));
}

/** Producers stop retrying a connection after this many attempts (about 15 s). */
const PRODUCER_RECONNECTS = 8;

const ROLE_OPTIONS: Record<RedisRole, RedisOptions> = {
  worker: { maxRetriesPerRequest: null, retryStrategy: (times) => reconnectDelay(times) },
  producer: {
    maxRetriesPerRequest: 2,
    retryStrategy: (times) => (times > PRODUCER_RECONNECTS ? null : reconnectDelay(times)),
  },
  control: { enableOfflineQueue: false, maxRetriesPerRequest: 1, retryStrategy: (times) => reconnectDelay(times) },
};

export function createRedisConnection(url: string, options: RedisConnectionOptions): Redis {
  const logger = options.logger;
  const where = describeRedisUrl(url);
  const ioredisOptions: RedisOptions = {
    connectionName: options.connectionName,
    connectTimeout: 10_000,
    ...ROLE_OPTIONS[options.role],
  };
  const redis = new Redis(url, ioredisOptions);

  // One line per outage, not one per reconnect attempt.
  let down = false;
  redis.on('error', (err: Error) => {
    if (down) return;
    down = true;
    logger?.warn({ redis: where, err: err.message }, 'redis connection lost; reconnecting');
  });
  redis.on('ready', () => {
    if (!down) return;
    down = false;
    logger?.info({ redis: where }, 'redis connection restored');
  });
  return redis;
}

/** `rediss://user:secret@host:6380/2` -> `rediss://host:6380/2`. */
export function describeRedisUrl(url: string): string {
  try {
    const u = new URL(url);
    const db = u.pathname.replace(/^\/+/, '');
    return `${u.protocol}//${u.hostname}${u.port ? `:${u.port}` : ''}${db ? `/${db}` : ''}`;
  } catch {
    return '(invalid redis url)';
  }
}
