import { describe, expect, it } from 'vitest';
import { HttpError, NetworkError, RequestValidationError, ResponseValidationError, TimeoutError } from '../src/service/errors.js';
import { MAX_RATE_LIMITED_RUNS, classifyRemovalFailure } from '../jobs/removals/remove-member.js';
import { createRemovalBackoff, removalBackoffPolicy } from '../jobs/removals/backoff.js';
import type { MinimalJob } from 'bullmq';

const path = '/v1/org/o/member/m';
const policy = removalBackoffPolicy(100);
const ctx = { rateLimitedRuns: 0, policy, random: () => 0.5 };
const http = (status: number, detail?: string, retryAfterMs?: number) => new HttpError(status, 'DELETE', path, detail, retryAfterMs);

describe('classifyRemovalFailure', () => {
  it('429 pauses the queue for Retry-After without burning an attempt', () => {
    expect(classifyRemovalFailure(http(429, 'slow down', 3_000), ctx)).toMatchObject({ kind: 'rate_limited', waitMs: 3_000 });
  });

  it('429 without Retry-After pauses for the backoff of the streak', () => {
    const first = classifyRemovalFailure(http(429), ctx);
    const later = classifyRemovalFailure(http(429), { ...ctx, rateLimitedRuns: 3 });
    expect(first).toMatchObject({ kind: 'rate_limited', waitMs: 75 });
    expect(later).toMatchObject({ kind: 'rate_limited', waitMs: 600 });
  });

  it('a 429 that never ends starts burning attempts', () => {
    expect(classifyRemovalFailure(http(429), { ...ctx, rateLimitedRuns: MAX_RATE_LIMITED_RUNS })).toMatchObject({ kind: 'retry' });
  });

  it.each([408, 500, 502, 503, 504])('%i is retried', (status) => {
    expect(classifyRemovalFailure(http(status), ctx).kind).toBe('retry');
  });

  it('network errors, timeouts and an unparsable 2xx are retried', () => {
    expect(classifyRemovalFailure(new NetworkError('ECONNRESET', 'DELETE', path), ctx).kind).toBe('retry');
    expect(classifyRemovalFailure(new TimeoutError('headers', 'DELETE', path), ctx).kind).toBe('retry');
    expect(classifyRemovalFailure(new ResponseValidationError('body is not valid JSON', 'DELETE', path), ctx).kind).toBe('retry');
  });

  it.each([400, 401, 403, 409, 422])('%i fails at once, with the detail in the reason', (status) => {
    const d = classifyRemovalFailure(http(status, 'member is the org owner'), ctx);
    expect(d.kind).toBe('final');
    expect(d.reason).toContain(`HTTP ${status}: member is the org owner`);
  });

  it('a FastAPI 422 detail list is in the reason', () => {
    const err = new HttpError(
      422,
      'DELETE',
      path,
      [{ loc: ['path', 'member_id'], msg: 'Input should be a valid UUID', type: 'uuid_parsing' }],
      undefined,
    );
    expect(classifyRemovalFailure(err, ctx).reason).toContain('path.member_id: Input should be a valid UUID');
  });

  it('a request the client refused to send is final', () => {
    expect(classifyRemovalFailure(new RequestValidationError('member_id', 'must be a non-empty string', 'DELETE', path), ctx).kind).toBe(
      'final',
    );
  });
});

describe('removal backoff strategy', () => {
  const job = (backoff: unknown) => ({ opts: { backoff } }) as unknown as MinimalJob;
  const strategy = createRemovalBackoff({ defaultBaseMs: 1_000, random: () => 1 });

  it('doubles from the job delay', () => {
    expect([1, 2, 3, 4].map((n) => strategy(n, 'removal', http(503), job({ type: 'removal', delay: 100 })))).toEqual([100, 200, 400, 800]);
  });

  it('uses Retry-After as a floor, capped at a minute', () => {
    expect(strategy(1, 'removal', http(503, undefined, 5_000), job({ type: 'removal', delay: 100 }))).toBe(5_000);
    expect(strategy(1, 'removal', http(503, undefined, 86_400_000), job({ type: 'removal', delay: 100 }))).toBe(60_000);
  });

  it('falls back to the worker default and caps the exponential part', () => {
    expect(strategy(1, 'removal', new Error('x'), job(undefined))).toBe(1_000);
    expect(strategy(30, 'removal', new Error('x'), job({ type: 'removal', delay: 100 }))).toBe(300_000);
  });

  it('jitters between half and all of the delay', () => {
    const low = createRemovalBackoff({ defaultBaseMs: 1_000, random: () => 0 });
    expect(low(3, 'removal', new Error('x'), job({ type: 'removal', delay: 100 }))).toBe(200);
  });
});
