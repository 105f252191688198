/**
 * What to do after a service call failed: wait and try again, or give it
 * up. Pure; the classification and the backoff curve are the shared ones of
 * ../service/retry.ts, this only adds the budget.
 *
 * Two bounds. `budgetMs` (SYNC_PAGE_RETRY_BUDGET_MS) caps the call: no
 * attempt starts later than that after the first one, so a page that
 * trickles or times out holds its run (and the mirror's write lock) for
 * about the budget, not for attempts × the request timeout (it was 5 × 120 s).
 * Within the budget, `maxAttempts` (SYNC_PAGE_ATTEMPTS) attempts are made,
 * and past them a retryable failure is tried again while the budget lasts:
 * a quick blip is retried a few times right away, and an outage of a minute
 * or two is ridden out with growing pauses. A budget of 0 means attempts
 * only. A failure that is not retryable (401, 403, 422, a page too large)
 * is never retried.
 */
import { backoffDelay, isRetryable, retryAfterOf, DEFAULT_BACKOFF, type BackoffPolicy } from '../service/retry.js';

export type RetryStep = { retry: true; delayMs: number } | { retry: false; why: 'not-retryable' | 'attempts-exhausted' | 'budget-spent' };

/** Time since the first attempt started, and how long retries may go on (0: attempts only). */
export interface RetryClock {
  elapsedMs: number;
  budgetMs: number;
}

/** `attempt` is the number of the attempt that just failed, from 1. */
export function nextRetryStep(
  err: unknown,
  attempt: number,
  maxAttempts: number,
  policy: BackoffPolicy = DEFAULT_BACKOFF,
  random: () => number = Math.random,
  clock: RetryClock = { elapsedMs: 0, budgetMs: 0 },
): RetryStep {
  if (!isRetryable(err)) return { retry: false, why: 'not-retryable' };
  const delayMs = backoffDelay(attempt, policy, retryAfterOf(err), random);
  if (clock.budgetMs > 0 && clock.elapsedMs + delayMs > clock.budgetMs) return { retry: false, why: 'budget-spent' };
  if (attempt < maxAttempts) return { retry: true, delayMs };
  if (clock.budgetMs <= 0) return { retry: false, why: 'attempts-exhausted' };
  return { retry: true, delayMs };
}
