/**
 * The process metrics every /metrics of ours carries (the daemon's status
 * endpoint, `serve`'s replica port): prom-client's default process_* and
 * nodejs_* families, less the three that `promtool check metrics` refuses.
 *
 * prom-client serves `nodejs_active_handles_total`, `_requests_total` and
 * `_resources_total` as gauges, and a name ending in `_total` is a counter's
 * (promtool exits 3: 'non-counter metrics should not have "_total" suffix').
 * Each is only the sum of its labelled family (`nodejs_active_handles{type}`
 * and the others stay), so dropping them loses nothing an operator cannot
 * query as `sum(nodejs_active_handles)`; renaming them would make names that
 * no other Node.js exporter serves. process_* stays whole: it is what a
 * Prometheus operator expects from any target.
 */
import { collectDefaultMetrics, type Registry } from 'prom-client';

/** The default gauges named like counters, dropped after prom-client registers them. */
const COUNTER_NAMED_GAUGES = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'] as const;

export function collectProcessMetrics(registry: Registry): void {
  collectDefaultMetrics({ register: registry });
  for (const name of COUNTER_NAMED_GAUGES) registry.removeSingleMetric(name);
}
