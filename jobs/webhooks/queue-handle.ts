/**
 * The webhook queue as the dispatcher and the CLI open it (the contract is
 * ./contract.ts): the BullMQ queue with the connection it was opened on, and
 * the events handed to it in cursor order.
 */
import { Queue } from 'bullmq';
import type { FeedEvent } from '../../db/change-feed.js';
import type { RedisClient } from '../redis-connection.js';
import type { Logger } from 'pino';
import { checkWebhookJob, WEBHOOK_JOB, webhookJobOptions, webhookQueueName, type WebhookJobData, type WebhookTarget } from './contract.js';

/** The queue, with the connection it was opened on (the dispatcher's cursor is read and written through it). */
export class WebhookQueue extends Queue<WebhookJobData, unknown, typeof WEBHOOK_JOB> {
  constructor(
    readonly redis: RedisClient,
    name: string,
    prefix: string,
    readOnly = false,
  ) {
    super(name, { connection: redis, prefix, skipMetasUpdate: readOnly });
  }
}

export interface WebhookQueueOptions {
  mirrorId: string;
  target: WebhookTarget;
  /** QUEUE_PREFIX. */
  prefix: string;
  logger?: Logger;
  /** Only reads (status, listings): no BullMQ meta write, so a look leaves Redis exactly as it was. */
  readOnly?: boolean;
}

/** The queue the dispatcher and the CLI share. */
export function createWebhookQueue(connection: RedisClient, options: WebhookQueueOptions): WebhookQueue {
  const queue = new WebhookQueue(
    connection,
    webhookQueueName(options.mirrorId, options.target.id, options.target.sink),
    options.prefix,
    options.readOnly,
  );
  // Connection errors also reject the calls they affect; this keeps BullMQ from printing each one.
  queue.on('error', (err) => options.logger?.debug({ err: err.message }, 'webhook queue connection error'));
  return queue;
}

/**
 * Hands events to the queue in cursor order, in one round trip. An event
 * whose job is still in Redis (waiting, active, failed, or among the
 * completed kept) is not added again. Returns the highest cursor handed
 * over (0 for none): what `writeDispatched` records next.
 */
export async function enqueueEvents(queue: WebhookQueue, events: readonly FeedEvent[], retentionDays: number): Promise<number> {
  const sorted = [...events].sort((a, b) => a.cursor - b.cursor);
  const jobs = sorted.map((e) => {
    const data: WebhookJobData = { cursor: e.cursor, event_id: e.id, user_id: e.userId };
    const checked = checkWebhookJob(WEBHOOK_JOB, data);
    if (!checked.ok) throw new Error(`event at cursor ${e.cursor} cannot be queued: ${checked.reason}`);
    return { name: WEBHOOK_JOB, data, opts: webhookJobOptions(e.id, retentionDays) } as const;
  });
  if (jobs.length > 0) await queue.addBulk(jobs);
  return sorted.at(-1)?.cursor ?? 0;
}
