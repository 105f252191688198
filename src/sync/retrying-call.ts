/**
 * Runs one idempotent service call (a list page, a resolve), retrying what is
 * worth retrying (see retry-step.ts) and waiting between attempts without
 * holding anything but a timer.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { BackoffPolicy } from '../service/retry.js';
import { nextRetryStep } from './retry-step.js';

export interface RetryNotice {
  /** What was being fetched, for the log: `offset 1500`, `resolve`. */
  what: string;
  attempt: number;
  delayMs: number;
  error: unknown;
}

export interface RetryOptions {
  /** Attempts per call, the first included (SYNC_PAGE_ATTEMPTS): always made when retryable. */
  attempts: number;
  /** Retries go on past `attempts` while the next one starts within this of the first (SYNC_PAGE_RETRY_BUDGET_MS); 0 or absent: attempts only. */
  budgetMs?: number;
  backoff?: BackoffPolicy;
  signal?: AbortSignal;
  onRetry?: (notice: RetryNotice) => void;
}

/** Resolves with the call's result, or rejects with the error of the last attempt. */
export async function callWithRetries<T>(what: string, call: (signal?: AbortSignal) => Promise<T>, options: RetryOptions): Promise<T> {
  const started = performance.now();
  for (let attempt = 1; ; attempt++) {
    try {
      return await call(options.signal);
    } catch (err) {
      if (options.signal?.aborted) throw err;
      const clock = { elapsedMs: performance.now() - started, budgetMs: options.budgetMs ?? 0 };
      const step = nextRetryStep(err, attempt, options.attempts, options.backoff, Math.random, clock);
      if (!step.retry) throw err;
      options.onRetry?.({ what, attempt, delayMs: step.delayMs, error: err });
      await sleep(step.delayMs, undefined, { signal: options.signal });
    }
  }
}
