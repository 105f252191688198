/**
 * The `removal` backoff type, installed on the worker as
 * `settings.backoffStrategy`: exponential with equal jitter from the job's
 * own `backoff.delay`, and the server's Retry-After (carried by the error the
 * processor threw) as a floor. Pure apart from the random source.
 */
import type { BackoffStrategy, MinimalJob } from 'bullmq';
import { backoffDelay, retryAfterOf, type BackoffPolicy } from '../../src/service/retry.js';

/** How the `removal` backoff type is set up. */
export interface RemovalBackoffOptions {
  /** Used when a job carries no `backoff.delay` (REMOVAL_BACKOFF_MS of the worker). */
  defaultBaseMs: number;
  /** Ceiling of the exponential part; a removal may wait out a long outage. */
  maxMs?: number;
  /** Ceiling on an honoured Retry-After. */
  maxRetryAfterMs?: number;
  random?: () => number;
}

const REMOVAL_MAX_BACKOFF_MS = 5 * 60_000;
const REMOVAL_MAX_RETRY_AFTER_MS = 60_000;

export function removalBackoffPolicy(baseMs: number, options: Omit<RemovalBackoffOptions, 'defaultBaseMs' | 'random'> = {}): BackoffPolicy {
  return {
    baseMs,
    maxMs: Math.max(baseMs, options.maxMs ?? REMOVAL_MAX_BACKOFF_MS),
    maxRetryAfterMs: options.maxRetryAfterMs ?? REMOVAL_MAX_RETRY_AFTER_MS,
  };
}

/** `attemptsMade` is BullMQ's: 1 after the first failure, so it is also the retry number. */
export function createRemovalBackoff(options: RemovalBackoffOptions): BackoffStrategy {
  return (attemptsMade: number, _type?: string, err?: Error, job?: MinimalJob): number => {
    const policy = removalBackoffPolicy(jobBaseDelay(job) ?? options.defaultBaseMs, options);
    return backoffDelay(attemptsMade, policy, retryAfterOf(err), options.random);
  };
}

function jobBaseDelay(job: MinimalJob | undefined): number | undefined {
  const backoff = job?.opts.backoff;
  if (typeof backoff === 'number') return backoff > 0 ? backoff : undefined;
  const delay = backoff?.delay;
  return typeof delay === 'number' && Number.isFinite(delay) && delay > 0 ? delay : undefined;
}
