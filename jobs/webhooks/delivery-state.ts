/**
 * What the webhook dispatcher and worker keep in Redis beside the jobs, in
 * the queue's own key space: the dispatched and settled cursors, the
 * endpoint's failure, and the delivery being retried.
 */
import { z } from 'zod';
import type { RedisClient } from '../redis-connection.js';
import { attemptsOf, checkWebhookJob } from './contract.js';
import type { WebhookQueue } from './queue-handle.js';

/**
 * The receiver failing as an endpoint (its address or set-up is wrong: a
 * redirect, 401, 403, 404, 410, a DNS or TLS error): since when, and the last
 * answer. Set by the worker while it holds deliveries, cleared by the next
 * 2xx; `status`, /readyz and /metrics read it.
 */
const EndpointFailureSchema = z.object({ since: z.string(), last: z.string() });
export type EndpointFailure = z.output<typeof EndpointFailureSchema>;

/** The endpoint's failure, or null while it is not failing (or the record is unreadable). */
export async function readEndpointFailure(queue: WebhookQueue): Promise<EndpointFailure | null> {
  return readEndpointKey(queue.redis, queue.toKey('endpoint'));
}

function readEndpointKey(redis: RedisClient, key: string): Promise<EndpointFailure | null> {
  return readJsonKey(redis, key, EndpointFailureSchema);
}

/** A JSON record the queue keeps beside its jobs, or null when absent or unreadable (a record is advice, never a failure). */
export async function readJsonKey<T>(redis: RedisClient, key: string, schema: z.ZodType<T>): Promise<T | null> {
  const raw = await redis.get(key);
  if (raw === null) return null;
  try {
    const parsed = schema.safeParse(JSON.parse(raw));
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
