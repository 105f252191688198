/**
 * The webhook queue contract (jobs/WEBHOOKS.md): the change feed's events
 * (db/change-feed.ts), handed by the daemon's dispatcher to a BullMQ queue
 * whose worker POSTs each to WEBHOOK_URL.
 *
 *   target     a fingerprint of WEBHOOK_URL (16 hex digits, `webhookTarget`)
 *   queue      `webhooks-<mirrorId>-<target>`, key prefix = QUEUE_PREFIX
 *   job name   `webhook`, job id = the event id
 *   data       `{ cursor, event_id, user_id }`: the body is read from the mirror's feed when sent
 *              (older versions' jobs carry `body`, which is then sent as it is)
 *   progress   `{ attempts, last }` while the worker retries it (`WebhookProgress`)
 *   cursor     `<prefix>:<queue>:dispatched`: the highest cursor handed to the queue
 *
 * The mirror id is part of the name so that two mirrors (or a sandbox and a
 * production daemon) sharing a Redis and a receiver never take each other's
 * deliveries; the target is, so that changing WEBHOOK_URL starts a new queue
 * instead of sending the old one's backlog to the new receiver.
 */
import { Queue } from 'bullmq';
import type { JobsOptions } from 'bullmq';
import { z } from 'zod';
import type { FeedEvent } from '../../db/change-feed.js';
import { formatIssues } from '../../src/runtime/zod-issues.js';
import type { RedisClient } from '../redis-connection.js';
import { UnreadableJob } from '../unreadable-job.js';
import { urlTarget, type UrlTarget } from '../url-target.js';
import type { Logger } from 'pino';
import { isRecord } from '../../src/runtime/is-record.js';

export const WEBHOOK_JOB = 'webhook';

/** A receiver as the queue names it, plus where to POST. */
export interface WebhookTarget extends UrlTarget {
  /**
   * WEBHOOK_URL as configured (a query string may carry the receiver's own
   * routing or token): requests go here; logs only ever show `url`.
   */
  endpoint: string;
}

export function webhookTarget(webhookUrl: string): WebhookTarget {
  return { ...urlTarget(webhookUrl), endpoint: webhookUrl };
}

/** BullMQ queue names may not contain ':'; MIRROR_ID is letters, digits, `_ . -` (src/runtime/config.ts). */
export function webhookQueueName(mirrorId: string, targetId: string): string {
  return `webhooks-${mirrorId}-${targetId}`;
}

export const WebhookJobSchema = z.strictObject({
  cursor: z.number({ error: 'must be a number (the event cursor)' }).int('must be an integer').positive('must be positive'),
  event_id: z
    .string({ error: 'must be a string (the event id)' })
    .regex(/^evt_[0-9a-f]+_[0-9]+$/, 'must be an event id (evt_<epoch>_<cursor>)'),
  user_id: z.string({ error: 'must be a string or null' }).min(1, 'must not be empty').nullable(),
  // Only in jobs an older version queued: the body now stays in the mirror (ChangeFeed.body) until the send.
  body: z.string({ error: 'must be a string (the event as delivered)' }).min(2, 'must be the event JSON').optional(),
});
export type WebhookJobData = z.output<typeof WebhookJobSchema>;

export type WebhookJobCheck = { ok: true; data: WebhookJobData } | { ok: false; reason: string };

/** Validates a job before anything is sent; the reason names fields, never echoes values. */
export function checkWebhookJob(name: string | undefined, data: unknown): WebhookJobCheck {
  if (data instanceof UnreadableJob) return { ok: false, reason: data.reason };
  if (name !== WEBHOOK_JOB) return { ok: false, reason: `unknown job name (expected '${WEBHOOK_JOB}')` };
  const parsed = WebhookJobSchema.safeParse(data);
  return parsed.success ? { ok: true, data: parsed.data } : { ok: false, reason: formatIssues(parsed.error.issues) };
}

/** Kept in the job's progress while it is retried, so listings and logs can count attempts. */
export interface WebhookProgress {
  attempts: number;
  /** The last failed attempt: `status 503`, or the network error. */
  last: string;
}

export function attemptsOf(progress: unknown): number {
  if (!isRecord(progress)) return 0;
  const n = progress.attempts;
  return typeof n === 'number' && Number.isSafeInteger(n) && n > 0 ? n : 0;
}

/**
 * Completed jobs kept, by count and age: their ids make a re-enqueue a
 * no-op. The dispatcher re-sends at most the batch it was writing when it
 * stopped, so the count must exceed the largest batch; a day is far beyond
 * a restart. Either bound keeps Redis memory bounded however busy the feed.
 */
export const KEEP_COMPLETED_WEBHOOKS = { count: 10_000, age: 86_400 } as const;

/**
 * Failed jobs kept: the operator's to-do list (`user-mirror webhooks
 * --failed`, and the failed count in `status` and /metrics). Up to 10,000,
 * for as long as the feed keeps their events (CHANGES_RETENTION_DAYS): past
 * that the event is gone from the mirror and a retry could send nothing.
 */
export function keepFailedWebhooks(retentionDays: number): { count: number; age: number } {
  return { count: 10_000, age: Math.ceil(retentionDays * 86_400) };
}

/**
 * One attempt as BullMQ counts them: the worker never lets BullMQ retry
 * (that would move the job to `delayed` and let later events overtake it);
 * it retries retryable failures itself (worker.ts).
 */
export function webhookJobOptions(eventId: string, retentionDays: number): JobsOptions {
  return { jobId: eventId, attempts: 1, removeOnComplete: KEEP_COMPLETED_WEBHOOKS, removeOnFail: keepFailedWebhooks(retentionDays) };
}

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
  const queue = new WebhookQueue(connection, webhookQueueName(options.mirrorId, options.target.id), options.prefix, options.readOnly);
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

/**
 * The receiver failing as an endpoint (its address or set-up is wrong: a
 * redirect, 401, 403, 404, 410, a DNS or TLS error): since when, and the last
 * answer. Set by the worker while it holds deliveries, cleared by the next
 * 2xx; `status`, /readyz and /metrics read it.
 */
export const EndpointFailureSchema = z.object({ since: z.string(), last: z.string() });
export type EndpointFailure = z.output<typeof EndpointFailureSchema>;

/** The endpoint's failure, or null while it is not failing (or the record is unreadable). */
export async function readEndpointFailure(queue: WebhookQueue): Promise<EndpointFailure | null> {
  return readEndpointKey(queue.redis, queue.toKey('endpoint'));
}

async function readEndpointKey(redis: RedisClient, key: string): Promise<EndpointFailure | null> {
  const raw = await redis.get(key);
  if (raw === null) return null;
  try {
    const parsed = EndpointFailureSchema.safeParse(JSON.parse(raw));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}

/** Records the endpoint as failing (keeping when it began); the worker calls it with its queue's `toKey('endpoint')`. */
export async function markEndpointFailing(redis: RedisClient, key: string, last: string, now: Date): Promise<EndpointFailure> {
  const previous = await readEndpointKey(redis, key);
  const failure = { since: previous?.since ?? now.toISOString(), last };
  await redis.set(key, JSON.stringify(failure));
  return failure;
}

/** The endpoint answered 2xx: no longer failing. True when it had been. */
export async function clearEndpointFailure(redis: RedisClient, key: string): Promise<boolean> {
  return (await redis.del(key)) > 0;
}

/** In the queue's own key space: one hash slot with its jobs on a Cluster, removed with the queue. */
function dispatchedKey(queue: WebhookQueue): string {
  return queue.toKey('dispatched');
}

/** The highest cursor the dispatcher has handed to the queue; 0 before the first. */
export async function readDispatched(queue: WebhookQueue): Promise<number> {
  return readCursor(queue.redis, dispatchedKey(queue));
}

/**
 * The highest cursor the worker has settled: delivered, or failed for good.
 * Jobs go one at a time in cursor order, so every event up to it is settled
 * (a manual retry aside): how far behind delivery is. 0 before the first.
 */
export async function readSettled(queue: WebhookQueue): Promise<number> {
  return readCursor(queue.redis, queue.toKey('settled'));
}

/** Raises the settled cursor to `cursor` (never lowers it); the worker calls it with its queue's `toKey('settled')`. */
export async function raiseSettled(redis: RedisClient, settledKey: string, cursor: number): Promise<void> {
  await redis.eval(RAISE_TO, 1, settledKey, String(cursor));
}

/**
 * Starts the queue's cursors again at `cursor`: only for a feed that was
 * rebuilt (a new mirror file, cursors from 1 again), which the dispatcher
 * tells by a dispatched cursor beyond the feed's newest.
 */
export async function resetCursors(queue: WebhookQueue, cursor: number): Promise<void> {
  await queue.redis.set(dispatchedKey(queue), String(cursor));
  await queue.redis.set(queue.toKey('settled'), String(cursor));
}

async function readCursor(redis: RedisClient, key: string): Promise<number> {
  const raw = await redis.get(key);
  const n = raw === null ? 0 : Number(raw);
  return Number.isSafeInteger(n) && n >= 0 ? n : 0;
}

/**
 * Records that every event up to `cursor` is in the queue. Never moves
 * back (a late write from a dispatcher that lost its lease must not make
 * the next one re-send, or retention drop, the wrong range). Returns the
 * stored value.
 */
export async function writeDispatched(queue: WebhookQueue, cursor: number): Promise<number> {
  if (!Number.isSafeInteger(cursor) || cursor < 0) throw new Error(`dispatched cursor must be a non-negative integer, got ${cursor}`);
  const stored = await queue.redis.eval(RAISE_TO, 1, dispatchedKey(queue), String(cursor));
  return Number(stored);
}

const RAISE_TO = `
local current = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local wanted = tonumber(ARGV[1])
if wanted > current then
  redis.call('SET', KEYS[1], ARGV[1])
  return wanted
end
return current
`;

/** A delivery the worker is retrying, as its job's progress records it. */
export interface RetryingWebhook {
  eventId: string;
  cursor: number;
  attempts: number;
  last: string;
}

/** Jobs looked at for the one being retried: the worker sends in cursor order, so it is among the first. */
const RETRY_LOOK = 20;

/**
 * The lowest-cursor undelivered job with a failed attempt recorded (a
 * timeout, a 5xx: `WebhookProgress`), or null: what holds the queue.
 */
export async function readRetrying(queue: WebhookQueue): Promise<RetryingWebhook | null> {
  const jobs = await queue.getJobs(['active', 'wait', 'prioritized', 'delayed'], 0, RETRY_LOOK - 1, true);
  let head: RetryingWebhook | null = null;
  for (const job of jobs) {
    const checked = checkWebhookJob(job.name, job.data);
    const attempts = attemptsOf(job.progress);
    if (!checked.ok || attempts === 0) continue;
    const last: unknown = (job.progress as Record<string, unknown>).last;
    if (head === null || checked.data.cursor < head.cursor)
      head = { eventId: checked.data.event_id, cursor: checked.data.cursor, attempts, last: typeof last === 'string' ? last : 'unknown' };
  }
  return head;
}
