/**
 * The gauges of webhook delivery's lag behind the change feed, read on
 * scrape from Redis and the mirror within the scrape's budget.
 */
import { Gauge, type Registry } from 'prom-client';
import type { WebhookLagFacts } from './change-delivery.js';
import { MIRROR_CACHE_MS, readWithinBudget, type CurrentSources } from './scrape-gauges.js';
import { DEFAULT_WEBHOOK_LAG_WARN_SECONDS } from '../health/status-findings.js';

/** How far webhook delivery lags behind the change feed. */
export function registerWebhookLagGauges(registers: Registry[], current: CurrentSources): void {
  // Read from Redis and the mirror on scrape, once for the three gauges.
  let lagRead: Promise<WebhookLagFacts | undefined> | undefined;
  const readLag = () => {
    lagRead ??= (async () => {
      const read = current().webhookLag;
      if (read === undefined) return undefined;
      return readWithinBudget(read);
    })().finally(() => setTimeout(() => (lagRead = undefined), MIRROR_CACHE_MS).unref());
    return lagRead;
  };
  const lagGauge = (name: string, help: string, pick: (l: WebhookLagFacts) => number) => {
    const gauge: Gauge = new Gauge({
      name,
      help,
      registers,
      async collect() {
        gauge.reset();
        const lag = await readLag();
        if (lag !== undefined) gauge.set(pick(lag));
      },
    });
    return gauge;
  };
  lagGauge(
    'user_mirror_webhook_events_behind',
    'Change events published but not yet delivered (or failed for good) to WEBHOOK_URL.',
    (l) => l.eventsBehind,
  );
  lagGauge(
    'user_mirror_webhook_seconds_behind',
    'Age of the oldest change event not yet delivered to WEBHOOK_URL; 0 when caught up.',
    (l) => l.secondsBehind,
  );
  lagGauge(
    'user_mirror_webhook_endpoint_failing',
    'Seconds since WEBHOOK_URL began failing as an endpoint (redirect, 401, 403, 404, 410, DNS, TLS): every event held; 0 while it answers.',
    (l) => (l.endpoint === null ? 0 : Math.max(1, Math.round((Date.now() - Date.parse(l.endpoint.since)) / 1000))),
  );
  lagGauge(
    'user_mirror_webhook_lagging',
    'Whether webhook delivery is further behind than WEBHOOK_LAG_WARN_SECONDS (a receiver that times out or is too slow): 1, and status exits 1.',
    (l) => (l.secondsBehind > (current().webhookLagWarnSeconds ?? DEFAULT_WEBHOOK_LAG_WARN_SECONDS) ? 1 : 0),
  );
  lagGauge(
    'user_mirror_webhook_failed',
    'Webhook deliveries failed for good (a 4xx answer), waiting for `user-mirror webhooks retry`.',
    (l) => l.failed,
  );
}
