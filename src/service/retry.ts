/**
 * Retry policy, pure: which failures are worth another attempt, and how long
 * to wait before it. Shared by the sync engine and the removal worker.
 */
import { HttpError, NetworkError, TimeoutError } from './errors.js';

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
