/**
 * The typed producer: validates a removal request and enqueues it, bound to
 * its management target, with the contract's job options. Nothing invalid
 * reaches Redis.
 *
 * A producer lives as long as its process (an HTTP handler: months). Its
 * connection (`createRedisConnection(..., { role: 'producer' })`) reconnects
 * forever; an enqueue while Redis is unreachable waits at most
 * PRODUCER_WAIT_MS for it and then fails with a RedisUnavailableError
 * (`sent: false`: nothing was queued), so the caller can answer its own
 * client and try again; the first enqueue after Redis is back succeeds. A
 * connection lost while the enqueue was in flight fails with `sent: true`:
 * the removal may be queued, and a retry collapses into it if so.
 *
 * Every job gets a fresh UUID as its id. With deduplication BullMQ answers
 * a collapsed request with the id of the job already pending, so "the id
 * that came back is not ours" is how a duplicate is recognised, in one round
 * trip and without a race.
 */
import { randomUUID } from 'node:crypto';
import { Queue } from 'bullmq';
import type { Logger } from '../../src/runtime/log.js';
import { errorMessage } from '../../src/runtime/errors.js';
import { RedisUnavailableError, redisReady, type RedisClient } from '../redis-connection.js';

export { RedisUnavailableError };
import {
  DEFAULT_REMOVAL_POLICY,
  REMOVE_MEMBER_JOB,
  managementTarget,
  removalQueueName,
  type ManagementTarget,
  checkRemovalPayload,
  removalDedupId,
  removalJobOptions,
  type RemovalJobPolicy,
  type RemovalPayload,
  type RemovalRequest,
  type RemovalResult,
} from './queue.js';
import { TolerantQueue } from '../tolerant-worker.js';

export type RemovalQueue = Queue<RemovalPayload, RemovalResult, typeof REMOVE_MEMBER_JOB>;

export interface RemovalQueueOptions {
  /** MANAGEMENT_URL of the service the removals are for (or its target); names the queue. */
  target: ManagementTarget | string;
  /** QUEUE_PREFIX. */
  prefix?: string;
  logger?: Logger;
  /** Only reads (status, listings): no BullMQ meta write, so a look leaves Redis exactly as it was. */
  readOnly?: boolean;
}

/** Where to enqueue: a queue you keep open, or a connection for one enqueue. */
export type RemovalQueueTarget = RemovalQueue | ({ connection: RedisClient } & RemovalQueueOptions);

/** How long an enqueue waits for a connection that is not up before it fails. */
export const PRODUCER_WAIT_MS = 2_000;

export interface EnqueueOptions {
  policy?: RemovalJobPolicy;
}

export interface EnqueuedRemoval {
  jobId: string;
  /** True when the request collapsed into a removal of the same member that was already pending or running. */
  deduplicated: boolean;
  dedupId: string;
  payload: RemovalPayload;
}

export class InvalidRemovalRequest extends Error {
  override name = 'InvalidRemovalRequest';
  constructor(readonly reason: string) {
    super(`invalid removal request: ${reason}`);
  }
}

export const DEFAULT_QUEUE_PREFIX = 'user-mirror';

/**
 * The queue handle producers and the CLI share: the queue of one management
 * target. Connection errors also reject the calls they affect; the listener
 * only keeps BullMQ from printing each one to stderr during an outage.
 */
export function createRemovalQueue(connection: RedisClient, options: RemovalQueueOptions): RemovalQueue {
  const target = typeof options.target === 'string' ? managementTarget(options.target) : options.target;
  // Tolerant: `getJob`/`getFailed` must be able to show a job whose data is not JSON (see tolerant-worker.ts).
  const queue = new TolerantQueue<RemovalPayload, RemovalResult, typeof REMOVE_MEMBER_JOB>(removalQueueName(target.id), {
    connection,
    prefix: options.prefix ?? DEFAULT_QUEUE_PREFIX,
    skipMetasUpdate: options.readOnly === true,
  });
  queue.on('error', (err) => options.logger?.debug({ err: err.message }, 'removal queue connection error'));
  return queue;
}

/** The target a removal queue serves, read back from its name. */
export function targetIdOf(queue: Pick<RemovalQueue, 'name'>): string {
  const id = queue.name.slice(removalQueueName('').length);
  if (removalQueueName(id) !== queue.name || !/^[0-9a-f]{16}$/.test(id)) {
    throw new Error(`queue ${JSON.stringify(queue.name)} is not a removal queue (use createRemovalQueue)`);
  }
  return id;
}

export async function enqueueMemberRemoval(
  target: RemovalQueueTarget,
  request: RemovalRequest,
  options: EnqueueOptions = {},
): Promise<EnqueuedRemoval> {
  const [result] = await enqueueMemberRemovals(target, [request], options);
  if (result === undefined) throw new Error('enqueue returned no job');
  return result;
}

/**
 * Many requests in one round trip (`addBulk`). All are validated first; one
 * invalid request rejects the batch before anything is enqueued.
 */
export async function enqueueMemberRemovals(
  target: RemovalQueueTarget,
  requests: readonly RemovalRequest[],
  options: EnqueueOptions = {},
): Promise<EnqueuedRemoval[]> {
  const policy = options.policy ?? DEFAULT_REMOVAL_POLICY;
  const owned = target instanceof Queue ? undefined : createRemovalQueue(target.connection, target);
  const queue = owned ?? (target as RemovalQueue);
  const targetId = targetIdOf(queue);
  const jobs = requests.map((request, i) => {
    const checked = checkRemovalPayload({ ...request, target: targetId });
    if (!checked.ok) throw new InvalidRemovalRequest(requests.length > 1 ? `request ${i}: ${checked.reason}` : checked.reason);
    const jobId = randomUUID();
    return { jobId, payload: checked.payload, opts: removalJobOptions(checked.payload, jobId, policy) };
  });
  try {
    if (jobs.length === 0) return [];
    await connected(queue);
    const added =
      jobs.length === 1 && jobs[0] !== undefined
        ? [await queue.add(REMOVE_MEMBER_JOB, jobs[0].payload, jobs[0].opts)]
        : await queue.addBulk(jobs.map((j) => ({ name: REMOVE_MEMBER_JOB, data: j.payload, opts: j.opts })));
    return jobs.map((j, i) => {
      const jobId = added[i]?.id ?? j.jobId;
      return { jobId, deduplicated: jobId !== j.jobId, dedupId: removalDedupId(j.payload), payload: j.payload };
    });
  } catch (err) {
    // Past `connected()` the script may have run before the connection broke: say so, never "not enqueued".
    if (!isConnectionError(err)) throw err;
    throw new RedisUnavailableError(
      `connection lost while enqueueing; the removal may have been queued, and a retry is safe: ${(err as Error).message}`,
      true,
    );
  } finally {
    await owned?.close();
  }
}

async function connected(queue: RemovalQueue): Promise<void> {
  const client = queue.opts.connection;
  if (typeof client === 'object' && client !== null && 'status' in client && typeof client.status === 'string') {
    await redisReady(client as RedisClient, PRODUCER_WAIT_MS).catch((err: unknown) => {
      throw new RedisUnavailableError(`removal not enqueued: ${errorMessage(err).replace(/^Redis is unreachable: /, '')}`);
    });
  }
}

/** ioredis's words for "no connection now" (offline queue off, connection closed, retries spent). */
function isConnectionError(err: unknown): boolean {
  return (
    err instanceof Error &&
    !(err instanceof RedisUnavailableError) &&
    /Stream isn't writeable|Connection is closed|max retries per request|ECONNREFUSED|ETIMEDOUT|Cluster isn't ready/i.test(err.message)
  );
}
