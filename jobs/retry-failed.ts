/**
 * Retrying failed jobs by hand (`removals retry`, `webhooks retry`): a
 * failed job goes back to `wait` with a fresh attempt budget. Shared by the
 * queues whose failed jobs are an operator's to-do list.
 */
import type { Job, Queue } from 'bullmq';

/** What retrying needs of a queue (any job types). */
export interface FailedJobs {
  getJob(jobId: string): Promise<Job | undefined>;
  getFailed(start?: number, end?: number): Promise<Job[]>;
}

export type RetryResult =
  { jobId: string; result: 'retried' } | { jobId: string; result: 'not_found' } | { jobId: string; result: 'not_failed'; state: string };

export interface RetryOptions {
  /** Runs on the failed job just before it is re-queued (e.g. to reset the queue's own attempt count). */
  beforeRetry?: (job: Job) => Promise<void>;
}

/** Re-queues a failed job with a fresh attempt budget (the old one is spent). */
export async function retryFailedJob(queue: FailedJobs | Queue, jobId: string, options: RetryOptions = {}): Promise<RetryResult> {
  const job = await queue.getJob(jobId);
  if (job === undefined) return { jobId, result: 'not_found' };
  const state = await job.getState();
  if (state !== 'failed') return { jobId, result: 'not_failed', state };
  await options.beforeRetry?.(job);
  await job.retry('failed', { resetAttemptsMade: true, resetAttemptsStarted: true });
  return { jobId, result: 'retried' };
}

/**
 * Every job failed at the time of the call. Ids are collected first: a
 * retried job that fails again at once must not be retried again in this pass.
 */
export async function retryAllFailedJobs(queue: FailedJobs | Queue, options: RetryOptions = {}, pageSize = 500): Promise<RetryResult[]> {
  const ids: string[] = [];
  for (let start = 0; ; start += pageSize) {
    const page = await queue.getFailed(start, start + pageSize - 1);
    for (const job of page) if (job.id !== undefined) ids.push(job.id);
    if (page.length < pageSize) break;
  }
  const results: RetryResult[] = [];
  for (const id of ids) results.push(await retryFailedJob(queue, id, options));
  return results;
}
