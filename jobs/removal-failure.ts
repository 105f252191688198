/**
 * What a failed removal attempt means, decided in one pure function so the
 * processor stays a thin adapter and the rules can be tested without Redis.
 *
 *   429 (within budget)   rate_limited: pause the whole queue, do not burn an attempt
 *   408, 429, 5xx, network, timeouts, unparsable 2xx
 *                         retry: BullMQ backs off (see removal-backoff.ts) and tries again
 *   401, 403, 422, other 4xx, a request we refused to send
 *                         final: fail now, with the service's `detail` in the reason
 *
 * And how long a retry waits: the `removal` backoff type, below.
 */
import type { BackoffStrategy, MinimalJob } from 'bullmq';
import { HttpError, RequestValidationError, ResponseValidationError } from '../src/service/errors.js';
import { backoffDelay, isRetryable, retryAfterOf, type BackoffPolicy } from '../src/service/retry.js';

export type FailureDecision =
  | { kind: 'rate_limited'; waitMs: number; reason: string }
  | { kind: 'retry'; reason: string }
  | { kind: 'final'; reason: string };

/**
 * A 429 that keeps coming must not keep a job alive forever without ever
 * counting: after this many rate-limited runs a 429 burns attempts like a 503.
 */
export const MAX_RATE_LIMITED_RUNS = 50;

export interface FailureContext {
  /** Runs of this job that ended in a rate limit so far (not counting this one). */
  rateLimitedRuns: number;
  policy: BackoffPolicy;
  random?: () => number;
}

export function classifyRemovalFailure(err: unknown, ctx: FailureContext): FailureDecision {
  const reason = describeError(err);
  if (err instanceof HttpError && err.status === 429 && ctx.rateLimitedRuns < MAX_RATE_LIMITED_RUNS) {
    return { kind: 'rate_limited', waitMs: rateLimitWait(err, ctx), reason };
  }
  if (isRetryable(err)) return { kind: 'retry', reason };
  // A 2xx we could not parse still removed the member; the retry will see a
  // 404 and finish as already_absent.
  if (err instanceof ResponseValidationError) return { kind: 'retry', reason };
  if (err instanceof HttpError || err instanceof RequestValidationError) {
    return { kind: 'final', reason: `permanent failure, not retried: ${reason}` };
  }
  // Unknown errors (a bug, an abort) are retried: a removal is idempotent and
  // attempts are bounded, whereas failing here could strand a valid request.
  return { kind: 'retry', reason };
}

/** The server's Retry-After when it sent one (capped), else our own backoff for this streak. */
export function rateLimitWait(err: unknown, ctx: FailureContext): number {
  return backoffDelay(ctx.rateLimitedRuns + 1, ctx.policy, retryAfterOf(err), ctx.random);
}

/** One line; HttpError messages already carry method, path, status and `detail`. */
export function describeError(err: unknown): string {
  if (err instanceof Error) return err.message.length > 2_000 ? `${err.message.slice(0, 2_000)}…` : err.message;
  return String(err);
}

/*
 * The `removal` backoff type, installed on the worker as
 * `settings.backoffStrategy`: exponential with equal jitter from the job's
 * own `backoff.delay`, and the server's Retry-After (carried by the error the
 * processor threw) as a floor. Pure apart from the random source.
 */
export interface RemovalBackoffOptions {
  /** Used when a job carries no `backoff.delay` (REMOVAL_BACKOFF_MS of the worker). */
  defaultBaseMs: number;
  /** Ceiling of the exponential part; a removal may wait out a long outage. */
  maxMs?: number;
  /** Ceiling on an honoured Retry-After. */
  maxRetryAfterMs?: number;
  random?: () => number;
}

export const REMOVAL_MAX_BACKOFF_MS = 5 * 60_000;
export const REMOVAL_MAX_RETRY_AFTER_MS = 60_000;

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
