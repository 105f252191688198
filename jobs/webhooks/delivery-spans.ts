/**
 * Webhook deliveries' spans (docs/tracing.md): one consumer
 * span per run of a delivery job, and in it a client span for the POST,
 * with the receiver's host (never its path or query: a token may sit
 * there), the status and the attempt. Never the event's body or signature.
 * With tracing off (src/runtime/tracing.ts) each of these only runs its function.
 */
import { withSpan } from '../../src/runtime/tracing.js';
import type { EventPoster } from './post-event.js';

/** One run of a delivery job. */
export function traceDelivery<T>(queueName: string, jobId: string | undefined, run: () => Promise<T>): Promise<T> {
  return withSpan(
    `${queueName} process`,
    {
      kind: 'consumer',
      attributes: { 'messaging.system': 'bullmq', 'messaging.destination.name': queueName, 'messaging.message.id': jobId ?? '' },
    },
    run,
  );
}

/** The poster with a span per POST. */
export function tracedPoster(poster: EventPoster, endpoint: string): EventPoster {
  const host = new URL(endpoint).host;
  return {
    post: (eventId, body) =>
      withSpan('POST', { kind: 'client', attributes: { 'http.request.method': 'POST', 'server.address': host } }, async (span) => {
        const attempt = await poster.post(eventId, body);
        if ('status' in attempt) span.setAttributes({ 'http.response.status_code': attempt.status });
        else span.recordError(new Error('network'));
        return attempt;
      }),
    close: () => poster.close(),
  };
}
