/**
 * Retrying a call to the service, in one place: which failures are worth
 * another attempt (and which say the key itself is refused), how long to
 * wait before it, when a call's budget is spent, and the loop that does it.
 * Everything but `callWithRetries` is pure. The sync engine uses all of it;
 * the removal worker uses the classification and the backoff curve through
 * its BullMQ adapter (jobs/removals/remove-member.ts).
 */
import { setMaxListeners } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { HttpError, NetworkError, TimeoutError } from './errors.js';
import { LeaderUntrusted } from './source-freshness.js';

/** Statuses that say "try again later", not "you asked for something wrong". */
export const RETRYABLE_STATUSES: ReadonlySet<number> = new Set([408, 429, 500, 502, 503, 504]);

export function isRetryable(err: unknown): boolean {
  if (err instanceof NetworkError || err instanceof TimeoutError) return true;
  if (err instanceof HttpError) return RETRYABLE_STATUSES.has(err.status);
  return false;
}

/** `Retry-After` is either delta-seconds or an HTTP date. Returns ms, or undefined. */
export function parseRetryAfter(value: string | undefined | null, nowMs: number = Date.now()): number | undefined {
  if (value === undefined || value === null) return undefined;
  const trimmed = value.trim();
  if (trimmed === '') return undefined;
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  // An HTTP date always names a weekday or month; this keeps Date.parse from reading `-5` as a year.
  if (!/[a-z]/i.test(trimmed)) return undefined;
  const at = Date.parse(trimmed);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - nowMs);
}

export interface BackoffPolicy {
  /** Delay before the first retry, before jitter. */
  baseMs: number;
  /** Upper bound of the exponential part. */
  maxMs: number;
  /** Upper bound on an honoured Retry-After (a hostile or buggy header must not park us for a day). */
  maxRetryAfterMs: number;
}

export const DEFAULT_BACKOFF: BackoffPolicy = { baseMs: 250, maxMs: 30_000, maxRetryAfterMs: 60_000 };

/**
 * Delay before retry number `attempt` (1 = first retry): "equal jitter"
 * exponential backoff, so two clients that failed together spread out, yet
 * never retry immediately. A Retry-After from the server is a floor.
 */
export function backoffDelay(
  attempt: number,
  policy: BackoffPolicy = DEFAULT_BACKOFF,
  retryAfterMs?: number,
  random: () => number = Math.random,
): number {
  const exp = Math.min(policy.maxMs, policy.baseMs * 2 ** Math.max(0, attempt - 1));
  const jittered = exp / 2 + random() * (exp / 2);
  const floor = retryAfterMs === undefined ? 0 : Math.min(retryAfterMs, policy.maxRetryAfterMs);
  return Math.round(Math.max(jittered, floor));
}

/** The server's requested wait, when the error carries one. */
export function retryAfterOf(err: unknown): number | undefined {
  return err instanceof HttpError ? err.retryAfterMs : undefined;
}

// ---- A call's budget: wait and try again, or give it up.
/*
 * Pure; the classification and the backoff curve above, plus the budget.
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

interface RetryNotice {
  /** What was being fetched, for the log: `offset 1500`, `resolve`. */
  what: string;
  attempt: number;
  delayMs: number;
  error: unknown;
}

export interface RetryOptions {
  /** Attempts per call, the first included (SYNC_PAGE_ATTEMPTS), made within the budget. */
  attempts: number;
  /** No attempt starts later than this after the first; past `attempts`, retries go on within it (SYNC_PAGE_RETRY_BUDGET_MS); 0 or absent: attempts only. */
  budgetMs?: number;
  backoff?: BackoffPolicy;
  signal?: AbortSignal;
  onRetry?: (notice: RetryNotice) => void;
}

/**
 * Readies a signal for `inFlight` retried calls at once: each request in flight and each
 * backoff timer listens on it, and past 10 listeners node warns of a leak that is not one.
 */
export function shareSignal(signal: AbortSignal, inFlight: number): void {
  setMaxListeners(2 * inFlight + 10, signal);
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

// ---- A refused key.
/*
 * A 401 or 403 from the service: the key itself is refused. Pure.
 *
 * Not retryable (retrying a revoked key only adds load), and not a page
 * failure either: every other page would be refused the same way, so the
 * run ends `failed` at once, with a message an operator can act on, instead
 * of `partial` with a generic "failed after retries". Returns why, or
 * undefined when `err` is no refusal.
 */
export function refusalOf(err: unknown): string | undefined {
  // A follower's answer from another leader than the run's: no other answer can be trusted either.
  if (err instanceof LeaderUntrusted) return err.message;
  if (!(err instanceof HttpError)) return undefined;
  const what = err.path.startsWith('/v2/user/resolve/') ? 'resolve users' : 'list users';
  if (err.status === 401) {
    return `the service refused the key (HTTP 401 when asked to ${what}): SERVICE_API_KEY is missing, wrong or revoked; not retried`;
  }
  if (err.status === 403) {
    return `the key may not ${what} (HTTP 403): check SERVICE_API_KEY's team and permissions; not retried`;
  }
  return undefined;
}
