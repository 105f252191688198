/**
 * The typed producer: validates a removal request and enqueues it with the
 * contract's job options. Nothing invalid reaches Redis.
 *
 * Every job gets a fresh UUID as its id. With deduplication BullMQ answers
 * a collapsed request with the id of the job already pending, so "the id
 * that came back is not ours" is how a duplicate is recognised, in one round
 * trip and without a race.
 */
import { randomUUID } from 'node:crypto';
import { Queue, type ConnectionOptions } from 'bullmq';
import type { Logger } from '../src/log.js';
import {
  DEFAULT_REMOVAL_POLICY,
  REMOVAL_QUEUE,
  REMOVE_MEMBER_JOB,
  checkRemovalPayload,
  removalDedupId,
  removalJobOptions,
  type RemovalJobPolicy,
  type RemovalPayload,
  type RemovalRequest,
  type RemovalResult,
} from './removal-queue.js';
import { TolerantQueue } from './tolerant-job.js';

export type RemovalQueue = Queue<RemovalPayload, RemovalResult, typeof REMOVE_MEMBER_JOB>;

/** Where to enqueue: a queue you keep open, or a connection for one enqueue. */
export type RemovalQueueTarget = RemovalQueue | { connection: ConnectionOptions; prefix?: string };

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
 * The queue handle producers and the CLI share; `prefix` is QUEUE_PREFIX.
 * Connection errors also reject the calls they affect; the listener only
 * keeps BullMQ from printing each one to stderr during an outage.
 */
export function createRemovalQueue(
  connection: ConnectionOptions,
  prefix: string = DEFAULT_QUEUE_PREFIX,
  options: { logger?: Logger } = {},
): RemovalQueue {
  // Tolerant: `getJob`/`getFailed` must be able to show a job whose data is not JSON (see tolerant-job.ts).
  const queue = new TolerantQueue<RemovalPayload, RemovalResult, typeof REMOVE_MEMBER_JOB>(REMOVAL_QUEUE, { connection, prefix });
  queue.on('error', (err) => options.logger?.debug({ err: err.message }, 'removal queue connection error'));
  return queue;
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
  const jobs = requests.map((request, i) => {
    const checked = checkRemovalPayload(request);
    if (!checked.ok) throw new InvalidRemovalRequest(requests.length > 1 ? `request ${i}: ${checked.reason}` : checked.reason);
    const jobId = randomUUID();
    return { jobId, payload: checked.payload, opts: removalJobOptions(checked.payload, jobId, policy) };
  });
  if (jobs.length === 0) return [];

  const owned = target instanceof Queue ? undefined : createRemovalQueue(target.connection, target.prefix);
  const queue = owned ?? (target as RemovalQueue);
  try {
    const added =
      jobs.length === 1 && jobs[0] !== undefined
        ? [await queue.add(REMOVE_MEMBER_JOB, jobs[0].payload, jobs[0].opts)]
        : await queue.addBulk(jobs.map((j) => ({ name: REMOVE_MEMBER_JOB, data: j.payload, opts: j.opts })));
    return jobs.map((j, i) => {
      const jobId = added[i]?.id ?? j.jobId;
      return { jobId, deduplicated: jobId !== j.jobId, dedupId: removalDedupId(j.payload), payload: j.payload };
    });
  } finally {
    await owned?.close();
  }
}
