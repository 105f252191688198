import { describe, expect, it } from 'vitest';
import { backoffDelay, isRetryable, parseRetryAfter, RETRYABLE_STATUSES } from '../src/service/retry.js';
import { HttpError, NetworkError, RequestValidationError, ResponseValidationError, TimeoutError } from '../src/service/errors.js';

describe('isRetryable', () => {
  it('retries transport failures and the "try later" statuses only', () => {
    expect(isRetryable(new NetworkError('ECONNRESET', 'GET', '/v2/user/'))).toBe(true);
    expect(isRetryable(new TimeoutError('headers', 'GET', '/v2/user/'))).toBe(true);
    for (const status of [408, 429, 500, 502, 503, 504]) {
      expect(isRetryable(new HttpError(status, 'GET', '/', undefined, undefined))).toBe(true);
    }
    for (const status of [400, 401, 403, 404, 409, 422, 501]) {
      expect(isRetryable(new HttpError(status, 'GET', '/', undefined, undefined))).toBe(false);
    }
    expect(isRetryable(new RequestValidationError('limit', 'must be <= 500', 'GET', '/'))).toBe(false);
    expect(isRetryable(new ResponseValidationError('users[0].user_id: bad', 'GET', '/'))).toBe(false);
    expect(isRetryable(new Error('boom'))).toBe(false);
    expect([...RETRYABLE_STATUSES].sort()).toEqual([408, 429, 500, 502, 503, 504]);
  });
});

describe('parseRetryAfter', () => {
  const now = Date.parse('2026-11-22T10:00:00Z');
  it('reads seconds and HTTP dates', () => {
    expect(parseRetryAfter('0', now)).toBe(0);
    expect(parseRetryAfter('12', now)).toBe(12_000);
    expect(parseRetryAfter('Sun, 22 Nov 2026 10:00:30 GMT', now)).toBe(30_000);
    expect(parseRetryAfter('Sun, 22 Nov 2026 09:00:00 GMT', now)).toBe(0);
  });
  it('ignores what it cannot read', () => {
    expect(parseRetryAfter(undefined, now)).toBeUndefined();
    expect(parseRetryAfter('', now)).toBeUndefined();
    expect(parseRetryAfter('soon', now)).toBeUndefined();
    expect(parseRetryAfter('-5', now)).toBeUndefined();
  });
});

describe('backoffDelay', () => {
  const policy = { baseMs: 100, maxMs: 1_000, maxRetryAfterMs: 5_000 };
  it('doubles per attempt, jittered within the upper half, capped', () => {
    expect(backoffDelay(1, policy, undefined, () => 0)).toBe(50);
    expect(backoffDelay(1, policy, undefined, () => 1)).toBe(100);
    expect(backoffDelay(3, policy, undefined, () => 1)).toBe(400);
    expect(backoffDelay(20, policy, undefined, () => 1)).toBe(1_000);
    expect(backoffDelay(20, policy, undefined, () => 0)).toBe(500);
  });
  it('waits at least Retry-After, but not forever', () => {
    expect(backoffDelay(1, policy, 3_000, () => 0)).toBe(3_000);
    expect(backoffDelay(1, policy, 3_600_000, () => 0)).toBe(5_000);
    expect(backoffDelay(5, policy, 10, () => 1)).toBe(1_000);
  });
});
