/**
 * The webhook contract's pure parts: Standard Webhooks signatures (checked
 * against the specification's published example), what an attempt's result
 * means, and how a receiver and its queue are named.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { webhookHeaders } from '../jobs/webhooks/signature.js';
import { verifyWebhook } from './support/doc-verifier.js';
import { decideDelivery, WEBHOOK_BACKOFF } from '../jobs/webhooks/decide-delivery.js';
import { checkWebhookJob, webhookQueueName, webhookTarget, WEBHOOK_JOB } from '../jobs/webhooks/contract.js';
import { urlTarget } from '../jobs/url-target.js';

const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const ID = 'msg_p5jXN8AQM9LWM0D4loKWxJek';
const TS = 1614265330;
const BODY = '{"test": 2432232314}';

describe('webhook signature', () => {
  it('matches the Standard Webhooks example', () => {
    expect(webhookHeaders(SECRET, ID, TS, BODY)).toEqual({
      'content-type': 'application/json',
      'webhook-id': ID,
      'webhook-timestamp': String(TS),
      'webhook-signature': 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
    });
  });

  afterEach(() => {
    vi.useRealTimers();
  });

  it("docs/changes.md's receiver check verifies, among several signatures, within the tolerance only", () => {
    const at = (seconds: number) => vi.useFakeTimers({ toFake: ['Date'], now: seconds * 1000 });
    const body = Buffer.from(BODY);
    const headers = webhookHeaders(SECRET, ID, TS, BODY);
    at(TS + 10);
    expect(verifyWebhook(SECRET, headers, body)).toBe(true);
    const rotated = { ...headers, 'webhook-signature': `v1,AAAA v2,xyz ${headers['webhook-signature']}` };
    expect(verifyWebhook(SECRET, rotated, body)).toBe(true);
    expect(verifyWebhook(SECRET, headers, Buffer.from(`${BODY} `))).toBe(false);
    expect(verifyWebhook(SECRET, { ...headers, 'webhook-id': 'other' }, body)).toBe(false);
    expect(verifyWebhook('whsec_b3RoZXJrZXlvdGhlcmtleQ==', headers, body)).toBe(false);
    expect(verifyWebhook(SECRET, { 'webhook-id': ID }, body)).toBe(false);
    at(TS + 301);
    expect(verifyWebhook(SECRET, headers, body)).toBe(false);
  });

  it('sends unsigned without a secret', () => {
    expect(webhookHeaders(undefined, ID, TS, BODY)).not.toHaveProperty('webhook-signature');
  });
});

describe('delivery decisions', () => {
  const policy = WEBHOOK_BACKOFF;
  const mid = () => 0.5;

  it('2xx is delivered; 400, 413 and 422 refuse the event and fail it for good', () => {
    expect(decideDelivery({ status: 204, retryAfter: undefined }, 1, policy)).toEqual({ kind: 'delivered', status: 204 });
    for (const status of [400, 413, 422]) expect(decideDelivery({ status, retryAfter: undefined }, 1, policy).kind).toBe('fail');
  });

  it("a redirect, 401, 403, 404, 410, any other 4xx, DNS and TLS errors are the endpoint's: held and retried, never failed", () => {
    for (const status of [301, 302, 307, 308, 401, 403, 404, 405, 410, 415]) {
      expect(decideDelivery({ status, retryAfter: undefined }, 1, policy, 0, mid)).toMatchObject({
        kind: 'hold',
        delayMs: 750,
        last: `status ${status}`,
      });
    }
    expect(decideDelivery({ error: 'ENOTFOUND: getaddrinfo', endpoint: true }, 3, policy, 0, mid)).toMatchObject({
      kind: 'hold',
      delayMs: 3_000,
    });
    expect(decideDelivery({ error: 'x', endpoint: true }, 30, policy, 0, () => 1)).toMatchObject({ kind: 'hold', delayMs: 60_000 });
  });

  it('5xx, 408, 429 and network errors retry: exponential from 1 s, jittered, capped at 60 s', () => {
    for (const status of [500, 502, 503, 504, 599, 408, 429])
      expect(decideDelivery({ status, retryAfter: undefined }, 1, policy).kind).toBe('retry');
    const delays = [1, 2, 3, 7, 20].map((n) => decideDelivery({ error: 'ECONNREFUSED' }, n, policy, 0, mid));
    expect(delays.map((d) => (d.kind === 'retry' ? d.delayMs : -1))).toEqual([750, 1_500, 3_000, 45_000, 45_000]);
    expect(decideDelivery({ error: 'x' }, 30, policy, 0, () => 1)).toMatchObject({ delayMs: 60_000 });
  });

  it('honours Retry-After (seconds or HTTP date) as the delay, up to 10 minutes', () => {
    const now = Date.parse('2025-01-01T00:00:00Z');
    expect(decideDelivery({ status: 429, retryAfter: '7' }, 9, policy, now)).toMatchObject({ kind: 'retry', delayMs: 7_000 });
    expect(decideDelivery({ status: 503, retryAfter: 'Wed, 01 Jan 2025 00:00:30 GMT' }, 1, policy, now)).toMatchObject({ delayMs: 30_000 });
    expect(decideDelivery({ status: 429, retryAfter: '86400' }, 1, policy, now)).toMatchObject({ delayMs: 600_000 });
    expect(decideDelivery({ status: 429, retryAfter: '0' }, 1, policy, now)).toMatchObject({ delayMs: 1_000 });
  });
});

describe('webhook queue contract', () => {
  it('names the receiver like a management target, without its query', () => {
    const t = webhookTarget('HTTPS://Hooks.Example.com:443/in/?token=s3cret');
    expect(t).toEqual({ ...urlTarget('https://hooks.example.com/in'), endpoint: 'HTTPS://Hooks.Example.com:443/in/?token=s3cret' });
    expect(t.url).toBe('https://hooks.example.com/in');
    expect(webhookQueueName('mirror-a', t.id)).toBe(`webhooks-mirror-a-${t.id}`);
  });

  it('checks job data field by field', () => {
    const good = { cursor: 3, event_id: 'evt_ab_3', user_id: null, body: '{"id":"evt_ab_3"}' };
    expect(checkWebhookJob(WEBHOOK_JOB, good)).toEqual({ ok: true, data: good });
    expect(checkWebhookJob(WEBHOOK_JOB, { ...good, cursor: 0 })).toEqual({ ok: false, reason: 'cursor: must be positive' });
    expect(checkWebhookJob(WEBHOOK_JOB, { ...good, event_id: 'x' })).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/^event_id: /),
    });
    expect(checkWebhookJob(WEBHOOK_JOB, { ...good, body: 5 })).toMatchObject({ ok: false, reason: expect.stringMatching(/^body: /) });
    expect(checkWebhookJob(WEBHOOK_JOB, { ...good, extra: 1 })).toMatchObject({ ok: false });
    expect(checkWebhookJob('other', good)).toMatchObject({ ok: false, reason: expect.stringContaining('unknown job name') });
  });
});
