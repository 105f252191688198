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
import { errorMessage } from '../../src/runtime/line-text.js';
import { RedisUnavailableError, isRedisConnectionError, redisFailureOf, redisReady, type RedisClient } from '../redis-connection.js';

import {
  DEFAULT_REMOVAL_POLICY,
  REMOVE_MEMBER_JOB,
  checkRemovalPayload,
  removalDedupId,
  removalJobOptions,
  type RemovalJobPolicy,
  type RemovalPayload,
  type RemovalRequest,
} from './contract.js';
import { createRemovalQueue, targetIdOf, type RemovalQueue, type RemovalQueueOptions } from './queue-handle.js';
import { traceEnqueue } from './removal-spans.js';

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

export class InvalidRemovalRequestError extends Error {
  override name = 'InvalidRemovalRequestError';
  constructor(readonly reason: string) {
    super(`invalid removal request: ${reason}`);
  }
}

/** @deprecated The earlier name of InvalidRemovalRequestError, kept for code written against it. */
export const InvalidRemovalRequest = InvalidRemovalRequestError;
/** @deprecated The earlier name of InvalidRemovalRequestError. */
export type InvalidRemovalRequest = InvalidRemovalRequestError;

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
    if (!checked.ok) throw new InvalidRemovalRequestError(requests.length > 1 ? `request ${i}: ${checked.reason}` : checked.reason);
    const jobId = randomUUID();
    return { jobId, payload: checked.payload, opts: removalJobOptions(checked.payload, jobId, policy) };
  });
  try {
    if (jobs.length === 0) return [];
    await connected(queue);
    const added = await traceEnqueue(queue.name, jobs, async (traced) =>
      traced.length === 1 && traced[0] !== undefined
        ? [await queue.add(REMOVE_MEMBER_JOB, traced[0].payload, traced[0].opts)]
        : await queue.addBulk(traced.map((j) => ({ name: REMOVE_MEMBER_JOB, data: j.payload, opts: j.opts }))),
    );
    return jobs.map((j, i) => {
      const jobId = added[i]?.id ?? j.jobId;
      return { jobId, deduplicated: jobId !== j.jobId, dedupId: removalDedupId(j.payload), payload: j.payload };
    });
  } catch (err) {
    // Past `connected()` the script may have run before the connection broke: say so, never "not enqueued".
    if (!isRedisConnectionError(err)) throw err;
    throw new RedisUnavailableError(
      `connection lost while enqueueing; the removal may have been queued, and a retry is safe: ${err.message}`,
      true,
      redisFailureOf(err.message),
    );
  } finally {
    await owned?.close();
  }
}

async function connected(queue: RemovalQueue): Promise<void> {
  const client = queue.opts.connection;
  if (typeof client === 'object' && client !== null && 'status' in client && typeof client.status === 'string') {
    await redisReady(client as RedisClient, PRODUCER_WAIT_MS).catch((err: unknown) => {
      if (err instanceof RedisUnavailableError) throw new RedisUnavailableError(`removal not enqueued: ${err.detail}`, false, err.failure);
      throw new RedisUnavailableError(`removal not enqueued: ${errorMessage(err)}`);
    });
  }
}
