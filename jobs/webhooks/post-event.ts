/**
 * One delivery attempt on the wire: the event POSTed to the receiver,
 * signed (signature.ts), and what came back, a status or a network error
 * told apart as passing (retry) or the endpoint's (DNS, TLS: hold). Kept
 * apart from the worker so that what decides the order and the retries
 * never touches HTTP, and the receiver's URL and answer stay in here.
 */
import { Agent, request } from 'undici';
import type { DeliveryAttempt } from './decide-delivery.js';
import type { WebhookTarget } from './contract.js';
import { webhookHeaders } from './signature.js';

/** Sends events to one receiver over one connection pool. */
export interface EventPoster {
  post(eventId: string, body: string): Promise<DeliveryAttempt>;
  /** Closes the connections; never throws. */
  close(): Promise<void>;
}

/** `timeoutMs` (WEBHOOK_TIMEOUT_MS) bounds one attempt, connect to last byte; `secret` undefined: unsigned. */
export function eventPoster(target: WebhookTarget, secret: string | undefined, timeoutMs: number): EventPoster {
  const agent = new Agent({ headersTimeout: timeoutMs, bodyTimeout: timeoutMs, connect: { timeout: timeoutMs, ...target.tls } });
  return {
    async post(eventId, body) {
      const signed = webhookHeaders(secret, eventId, Math.floor(Date.now() / 1000), body);
      // A sink's field policy, named beside the event as the other kinds name it (docs/sinks.md).
      const headers = target.policy === undefined ? signed : { ...signed, 'webhook-policy': target.policy };
      try {
        const res = await request(target.endpoint, {
          method: 'POST',
          headers,
          body,
          dispatcher: agent,
          signal: AbortSignal.timeout(timeoutMs),
        });
        // The receiver's answer is not ours to keep or log; reading it frees the connection.
        await res.body.dump({ limit: 64 * 1024 }).catch(() => undefined);
        const retryAfter = res.headers['retry-after'];
        return { status: res.statusCode, retryAfter: Array.isArray(retryAfter) ? retryAfter[0] : retryAfter };
      } catch (err) {
        return networkAttempt(err, timeoutMs);
      }
    },
    async close() {
      await agent.close().catch(() => undefined);
    },
  };
}

/** DNS and TLS failures: the address or the receiver's set-up is wrong, not a passing trouble. */
const ENDPOINT_ERROR = /^(ENOTFOUND|EAI_AGAIN|ERR_TLS_|ERR_SSL_|CERT_|DEPTH_ZERO_SELF_SIGNED_CERT|SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_)/;

function networkAttempt(err: unknown, timeoutMs: number): DeliveryAttempt {
  const code = (err as { code?: unknown } | null)?.code;
  const cause = (err as { cause?: { code?: unknown } } | null)?.cause?.code;
  const endpoint = [code, cause].some((c) => typeof c === 'string' && ENDPOINT_ERROR.test(c));
  return { error: networkError(err, timeoutMs), endpoint };
}

/** A network failure in one line, without the URL (its query may carry the receiver's token). */
function networkError(err: unknown, timeoutMs: number): string {
  if (err instanceof Error && (err.name === 'TimeoutError' || err.name === 'AbortError')) return `no answer within ${timeoutMs} ms`;
  const e = err as { code?: unknown; message?: unknown };
  const code = typeof e.code === 'string' ? e.code : 'network error';
  const message = typeof e.message === 'string' ? e.message.replace(/https?:\/\/\S+/g, '(url)') : String(err);
  return `${code}: ${message}`.slice(0, 300);
}
