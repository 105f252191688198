/**
 * What one delivery attempt's result means: delivered, retried, the
 * endpoint held, or the event failed for good. Pure, apart from the worker
 * that acts on it, so every answer's verdict is tested without a receiver.
 */
import { backoffDelay, parseRetryAfter, type BackoffPolicy } from '../../src/service/retry.js';

/** From 1 s, doubling to 60 s, jittered; a Retry-After is honoured up to 10 min. */
export const WEBHOOK_BACKOFF: BackoffPolicy = { baseMs: 1_000, maxMs: 60_000, maxRetryAfterMs: 10 * 60_000 };

/** An attempt's result: the receiver's answer, or a network error (`endpoint`: DNS or TLS, the address or set-up is wrong). */
export type DeliveryAttempt = { status: number; retryAfter: string | undefined } | { error: string; endpoint?: boolean };

/**
 * `retry`: a passing trouble (5xx, 408, 429, timeouts, refused connections),
 * retried first after a pause. `hold`: the endpoint is wrong, not the event
 * (a redirect, 401, 403, 404, 410, any 4xx but the event's own, DNS or TLS):
 * every event waits, retried on the same schedule, and the endpoint is marked
 * failing for the operator, since failing events one by one would lose the
 * whole feed to a misconfiguration. `fail`: this event's body is refused
 * (400, 413, 422): it fails for good and the next one goes.
 */
export type DeliveryDecision =
  | { kind: 'delivered'; status: number }
  | { kind: 'retry'; delayMs: number; last: string; status?: number }
  | { kind: 'hold'; delayMs: number; last: string; status?: number }
  | { kind: 'fail'; reason: string; status: number };

/** Answers that refuse the event itself (its body); every other 4xx (and 3xx) is the endpoint's failure. */
const EVENT_REFUSALS: ReadonlySet<number> = new Set([400, 413, 422]);

/**
 * What one attempt's result means (pure). `attempt` counts from 1. A
 * Retry-After (429, 503) is the delay itself, within [baseMs, maxRetryAfterMs]:
 * the receiver said when it can take more.
 */
export function decideDelivery(
  result: DeliveryAttempt,
  attempt: number,
  policy: BackoffPolicy,
  nowMs = Date.now(),
  random: () => number = Math.random,
): DeliveryDecision {
  if ('error' in result) {
    return {
      kind: result.endpoint === true ? 'hold' : 'retry',
      delayMs: backoffDelay(attempt, policy, undefined, random),
      last: result.error,
    };
  }
  const { status } = result;
  if (status >= 200 && status < 300) return { kind: 'delivered', status };
  if (status >= 500 || status === 429 || status === 408) {
    const asked = parseRetryAfter(result.retryAfter, nowMs);
    const delayMs =
      asked === undefined
        ? backoffDelay(attempt, policy, undefined, random)
        : Math.min(policy.maxRetryAfterMs, Math.max(policy.baseMs, asked));
    return { kind: 'retry', delayMs, last: `status ${status}`, status };
  }
  if (EVENT_REFUSALS.has(status)) {
    return { kind: 'fail', reason: `receiver refused this event (${status}); not retried (webhooks retry re-sends it)`, status };
  }
  return { kind: 'hold', delayMs: backoffDelay(attempt, policy, undefined, random), last: `status ${status}`, status };
}
