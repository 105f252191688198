/**
 * What to do after a service call failed: wait and try again, or give it
 * up. Pure; the classification and the backoff curve are the shared ones of
 * ../service/retry.ts, this only adds the attempt budget.
 */
import { backoffDelay, isRetryable, retryAfterOf, DEFAULT_BACKOFF, type BackoffPolicy } from '../service/retry.js';

export type RetryStep = { retry: true; delayMs: number } | { retry: false; why: 'not-retryable' | 'attempts-exhausted' };

/** `attempt` is the number of the attempt that just failed, from 1. */
export function nextRetryStep(
  err: unknown,
  attempt: number,
  maxAttempts: number,
  policy: BackoffPolicy = DEFAULT_BACKOFF,
  random: () => number = Math.random,
): RetryStep {
  if (!isRetryable(err)) return { retry: false, why: 'not-retryable' };
  if (attempt >= maxAttempts) return { retry: false, why: 'attempts-exhausted' };
  return { retry: true, delayMs: backoffDelay(attempt, policy, retryAfterOf(err), random) };
}
