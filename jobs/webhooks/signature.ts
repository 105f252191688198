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
 * secret); one valid signature is enough. The receiver's check is the one
 * docs/changes.md gives receivers (run by the tests: test/support/doc-verifier.ts). Pure.
 */
import { createHmac } from 'node:crypto';

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
