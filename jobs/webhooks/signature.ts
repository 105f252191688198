/**
 * Webhook signatures as the Standard Webhooks specification defines them
 * (https://www.standardwebhooks.com), so a receiver can verify ours with any
 * of its libraries:
 *
 *   webhook-id         the event id: the same on every attempt, the receiver's dedup key
 *   webhook-timestamp  unix seconds of this attempt
 *   webhook-signature  `v1,<base64 HMAC-SHA256 over "{id}.{timestamp}.{body}">`, key = base64 after `whsec_`
 *
 * Several space-separated signatures may be sent (a receiver rotating its
 * secret); one valid signature is enough. Pure.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

const PREFIX = 'whsec_';

/** The HMAC key of a `whsec_<base64>` secret (WEBHOOK_SECRET). */
function keyOf(secret: string): Buffer {
  if (!secret.startsWith(PREFIX)) throw new Error('webhook secret must start with whsec_');
  return Buffer.from(secret.slice(PREFIX.length), 'base64');
}

function sign(key: Buffer, id: string, timestamp: number, body: string): string {
  return createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64');
}

/** The headers of one attempt. Without a secret the request goes unsigned (no `webhook-signature`). */
export function webhookHeaders(secret: string | undefined, id: string, timestamp: number, body: string): Record<string, string> {
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'webhook-id': id,
    'webhook-timestamp': String(timestamp),
  };
  if (secret !== undefined) headers['webhook-signature'] = `v1,${sign(keyOf(secret), id, timestamp, body)}`;
  return headers;
}

export type WebhookVerification = { ok: true; id: string; timestamp: number } | { ok: false; reason: string };

/**
 * What a receiver does with a request: checks the timestamp is within
 * `toleranceSeconds` of now (a replayed request is refused) and that one of
 * the `v1` signatures matches, in constant time. `headers` as node:http
 * gives them (lower-case names).
 */
export function verifyWebhook(
  secret: string,
  headers: Readonly<Record<string, string | string[] | undefined>>,
  body: string,
  toleranceSeconds = 300,
  nowSeconds: number = Math.floor(Date.now() / 1000),
): WebhookVerification {
  const header = (name: string): string | undefined => {
    const v = headers[name];
    return Array.isArray(v) ? v[0] : v;
  };
  const id = header('webhook-id');
  const ts = header('webhook-timestamp');
  const signatures = header('webhook-signature');
  if (id === undefined || ts === undefined || signatures === undefined)
    return { ok: false, reason: 'missing webhook-id, webhook-timestamp or webhook-signature' };
  if (!/^\d+$/.test(ts)) return { ok: false, reason: 'webhook-timestamp is not unix seconds' };
  const timestamp = Number(ts);
  if (Math.abs(nowSeconds - timestamp) > toleranceSeconds) return { ok: false, reason: 'webhook-timestamp outside the tolerance' };
  const expected = Buffer.from(sign(keyOf(secret), id, timestamp, body));
  for (const entry of signatures.split(' ')) {
    const [version, value] = entry.split(',', 2);
    if (version !== 'v1' || value === undefined) continue;
    const given = Buffer.from(value);
    if (given.length === expected.length && timingSafeEqual(given, expected)) return { ok: true, id, timestamp };
  }
  return { ok: false, reason: 'no matching v1 signature' };
}
