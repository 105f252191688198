/**
 * The webhook queue contract (jobs/WEBHOOKS.md): the change feed's events
 * (db/change-feed.ts), handed by the daemon's dispatcher to a BullMQ queue
 * whose worker POSTs each to WEBHOOK_URL.
 *
 *   target     a fingerprint of WEBHOOK_URL (16 hex digits, `webhookTarget`)
 *   queue      `webhooks-<mirrorId>-<target>` (WEBHOOK_URL), `webhooks-<mirrorId>-<sink>-<target>` (a
 *              webhook sink of SINKS_FILE), key prefix = QUEUE_PREFIX
 *   job name   `webhook`, job id = the event id (`<event id>.replay-<n>` in a replay: ./replay.ts)
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
import type { JobsOptions } from 'bullmq';
import { z } from 'zod';
import { formatIssues } from '../../src/runtime/zod-issues.js';
import { UnreadableJob } from '../unreadable-job.js';
import { urlTarget, type UrlTarget } from '../url-target.js';
import { isRecord } from '../../src/runtime/is-record.js';

export const WEBHOOK_JOB = 'webhook';

/** A receiver as the queue names it, plus where to POST. */
export interface WebhookTarget extends UrlTarget {
  /**
   * The webhook sink's name (SINKS_FILE), which names its own queue; undefined for
   * WEBHOOK_URL, whose queue keeps the name it always had (its cursor carries over).
   */
  sink?: string;
  /** The field policy's `<name>:<fingerprint>`, sent as `webhook-policy`; undefined for WEBHOOK_URL. */
  policy?: string;
  /** CA, client certificate and key for the receiver's TLS (PEM text). */
  tls?: { ca?: string; cert?: string; key?: string; servername?: string };
  /**
   * WEBHOOK_URL as configured (a query string may carry the receiver's own
   * routing or token): requests go here; logs only ever show `url`.
   */
  endpoint: string;
}

export function webhookTarget(webhookUrl: string, more: Pick<WebhookTarget, 'sink' | 'policy' | 'tls'> = {}): WebhookTarget {
  return { ...urlTarget(webhookUrl), endpoint: webhookUrl, ...more };
}

/** BullMQ queue names may not contain ':'; MIRROR_ID is letters, digits, `_ . -` (src/runtime/config.ts). */
export function webhookQueueName(mirrorId: string, targetId: string, sink?: string): string {
  return sink === undefined ? `webhooks-${mirrorId}-${targetId}` : `webhooks-${mirrorId}-${sink}-${targetId}`;
}

const WebhookJobSchema = z.strictObject({
  cursor: z.number({ error: 'must be a number (the event cursor)' }).int('must be an integer').positive('must be positive'),
  event_id: z
    .string({ error: 'must be a string (the event id)' })
    .regex(/^evt_[0-9a-f]+_[0-9]+$/, 'must be an event id (evt_<epoch>_<cursor>)'),
  user_id: z.string({ error: 'must be a string or null' }).min(1, 'must not be empty').nullable(),
  // Only in jobs an older version queued: the body now stays in the mirror (ChangeFeed.body) until the send.
  body: z.string({ error: 'must be a string (the event as delivered)' }).min(2, 'must be the event JSON').optional(),
  // Only in a replay's jobs (./replay.ts): which replay re-sent the event.
  replay: z.number({ error: 'must be a number (the replay)' }).int('must be an integer').positive('must be positive').optional(),
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
function keepFailedWebhooks(retentionDays: number): { count: number; age: number } {
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
