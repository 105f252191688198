/**
 * Failed webhook deliveries, as an operator sees them (the receiver refused
 * them: 3xx or a 4xx other than 408 and 429, or the job was invalid), and
 * sending them again. A retried event goes to the back of the queue: it
 * arrives after events that were published later.
 */
import type { Job } from 'bullmq';
import { retryAllFailedJobs, retryFailedJob, type RetryOptions, type RetryResult } from '../retry-failed.js';
import { attemptsOf } from './contract.js';
import { isRecord } from '../../src/runtime/is-record.js';
import type { WebhookQueue } from './queue-handle.js';

export interface FailedWebhook {
  event_id: string;
  cursor: number | null;
  user_id: string | null;
  attempts: number;
  failed_at: string | null;
  /** Why: `receiver answered 400; …`, or what made the job invalid. */
  reason: string | null;
}

/** Newest failure first. Job data is untrusted here: it may be why the job failed. */
export async function listFailedWebhooks(queue: WebhookQueue, limit: number): Promise<FailedWebhook[]> {
  const jobs: Job[] = await queue.getFailed(0, limit - 1);
  return jobs.map((job) => {
    const data: unknown = job.data;
    const fields: Record<string, unknown> = isRecord(data) ? data : {};
    return {
      event_id: job.id ?? '',
      cursor: typeof fields.cursor === 'number' ? fields.cursor : null,
      user_id: typeof fields.user_id === 'string' ? fields.user_id : null,
      attempts: Math.max(attemptsOf(job.progress), job.attemptsMade),
      failed_at: job.finishedOn ? new Date(job.finishedOn).toISOString() : null,
      reason: job.failedReason ?? null,
    };
  });
}

/** The retried delivery starts its backoff afresh. */
const RESET_ATTEMPTS: RetryOptions = { beforeRetry: (job) => job.updateProgress(0) };

export function retryFailedWebhook(queue: WebhookQueue, eventId: string): Promise<RetryResult> {
  return retryFailedJob(queue, eventId, RESET_ATTEMPTS);
}

export function retryAllFailedWebhooks(queue: WebhookQueue): Promise<RetryResult[]> {
  return retryAllFailedJobs(queue, RESET_ATTEMPTS);
}
