/**
 * A short command's use of Redis, bounded (`removals`, `webhooks`,
 * `remove-member`): the one mechanism by which each answers within a
 * deadline that names the cause, instead of waiting out an outage in
 * silence (issue 50: `removals` and `webhooks` never returned when Redis
 * refused the credentials or nothing listened).
 *
 * - Connecting: the command waits for its connection at most
 *   COMMAND_REDIS_WAIT_MS (a Redis that restarts is back within it) and
 *   fails at once when Redis refuses the credentials (NOAUTH, WRONGPASS:
 *   waiting does not change them).
 * - Each reply: the connection's role is `command`, so a Redis that took
 *   the connection and then went quiet fails the command within
 *   COMMAND_REPLY_MS.
 * - Closing: queues opened on the connection are closed within
 *   CLOSE_MS; BullMQ's close waits on a connection that may never free it.
 *
 * Every failure is a RedisUnavailableError whose message starts with the
 * cause ("Redis is unreachable", "Redis refused the connection", "Redis
 * timed out") and ends with where (never a password); the CLI prints it
 * and exits 1.
 */
import { settleWithin } from '../src/runtime/deadline.js';
import {
  RedisUnavailableError,
  createRedisConnection,
  describeRedis,
  isRedisConnectionError,
  redisFailureOf,
  redisReady,
  type RedisClient,
  type RedisEndpoint,
  type RedisRole,
} from './redis-connection.js';

/** How long a command waits for Redis to accept its connection before it answers with the cause. */
const COMMAND_REDIS_WAIT_MS = 5_000;
const CLOSE_MS = 2_000;

interface Closable {
  close(): Promise<unknown>;
}

export interface CommandRedis {
  /** The command's connection (role `command`), ready. */
  readonly redis: RedisClient;
  /** Another connection, ready or failed as the first (a blocking reader: role `worker`). */
  readonly connect: (role: RedisRole) => Promise<RedisClient>;
  /** Closed, within a bound, when the command ends. */
  readonly track: <T extends Closable>(closable: T) => T;
}

/** Runs `work` on a ready connection to `endpoint`; whatever it opened is closed, and Redis's failures are named. */
export async function withCommandRedis<T>(
  endpoint: RedisEndpoint,
  connectionName: string,
  work: (session: CommandRedis) => Promise<T>,
  waitMs = COMMAND_REDIS_WAIT_MS,
): Promise<T> {
  const where = describeRedis(endpoint);
  const clients: RedisClient[] = [];
  const closables: Closable[] = [];
  const connect = async (role: RedisRole): Promise<RedisClient> => {
    const client = createRedisConnection(endpoint, { role, connectionName });
    // Its errors are read by redisReady and by the command's own calls; unheard, ioredis would print each.
    client.on('error', () => undefined);
    clients.push(client);
    await redisReady(client, waitMs);
    return client;
  };
  try {
    const redis = await connect('command');
    return await work({
      redis,
      connect,
      track: (closable) => {
        closables.push(closable);
        return closable;
      },
    });
  } catch (err) {
    throw named(err, where);
  } finally {
    await settleWithin(Promise.all(closables.map((c) => c.close().catch(() => undefined))), CLOSE_MS);
    for (const client of clients) if (client.status !== 'end') client.disconnect();
  }
}

/** The error with the cause first and where last; anything but a lost connection passes unchanged. */
function named(err: unknown, where: string): unknown {
  if (err instanceof RedisUnavailableError) return new RedisUnavailableError(`${err.detail} (${where})`, err.sent, err.failure);
  if (isRedisConnectionError(err)) return new RedisUnavailableError(`${err.message} (${where})`, true, redisFailureOf(err.message));
  return err;
}
