/**
 * The handle on one management target's removal queue, which producers,
 * the CLI, `status` and the daemon share: a BullMQ Queue that can show jobs
 * BullMQ cannot read (../tolerant-bullmq.ts), named after its target.
 */
import type { Queue } from 'bullmq';
import type { RedisClient } from '../redis-connection.js';
import {
  DEFAULT_QUEUE_PREFIX,
  REMOVE_MEMBER_JOB,
  removalQueueName,
  type ManagementTarget,
  type RemovalPayload,
  type RemovalResult,
} from './contract.js';
import { TolerantQueue } from '../tolerant-bullmq.js';
import { urlTarget } from '../url-target.js';
import type { Logger } from 'pino';

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

/**
 * The queue handle producers and the CLI share: the queue of one management
 * target. Connection errors also reject the calls they affect; the listener
 * only keeps BullMQ from printing each one to stderr during an outage.
 */
export function createRemovalQueue(connection: RedisClient, options: RemovalQueueOptions): RemovalQueue {
  const target = typeof options.target === 'string' ? urlTarget(options.target) : options.target;
  // Tolerant: `getJob`/`getFailed` must be able to show a job whose data is not JSON (see ../tolerant-bullmq.ts).
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
