/**
 * The daemon's Prometheus metrics, in one registry of its own (never the
 * prom-client global one, so tests and a second daemon in one process do not
 * collide).
 *
 * Two kinds:
 * - events counted as they happen (sync runs, pages, HTTP responses, removal
 *   outcomes, watchdog restarts), here;
 * - state read on scrape (users in the mirror, the last successful sync,
 *   queue depths, Redis reachability), in scrape-gauges.ts, because after a
 *   restart a counter starts from zero but the mirror and the queues do not.
 *
 * The scrape gauges are registered among the counters, where they always
 * were: /metrics lists metrics in the order they were registered.
 */
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { ResponseEvent } from '../service/client.js';
import type { SyncJobResult } from '../../jobs/sync/worker.js';
import type { RemovalOutcome } from '../../jobs/removals/remove-member.js';
import type { WebhookOutcome } from '../../jobs/webhooks/outcomes.js';
import { collectProcessMetrics } from '../runtime/process-metrics.js';
import type { WatchdogVerdict } from './watchdog.js';
import { registerMirrorGauges, registerRedisGauges, type MetricSources } from './scrape-gauges.js';
import { registerFindingGauges } from './finding-gauges.js';
import { registerDriftMetrics } from './drift-metrics.js';
import { registerWebhookLagGauges } from './webhook-gauges.js';
import { registerBackupGauges, registerExportGauges } from './backup-gauges.js';
import type { SyncStatus, SyncSummary } from '../sync/run-summary.js';

/**
 * Every value a counter's label can take, as records so that the compiler
 * names one a type gains and this lacks. Each label set starts at 0 (see
 * createMetrics): a series that first appears at 1 is one `increase()` and
 * `rate()` never count.
 */
const SYNC_RUN_STATUSES: Record<SyncStatus | 'skipped', true> = { succeeded: true, partial: true, failed: true, skipped: true };
const USER_CHANGES: Record<'created' | 'updated' | 'deleted', true> = { created: true, updated: true, deleted: true };
const REMOVAL_OUTCOMES: Record<RemovalOutcome, true> = {
  succeeded: true,
  already_absent: true,
  failed: true,
  retrying: true,
  rate_limited: true,
};
const WEBHOOK_OUTCOMES: Record<WebhookOutcome['outcome'], true> = { delivered: true, retrying: true, failed: true };
const RESTART_REASONS: Record<Extract<WatchdogVerdict, { action: 'restart' }>['reason'], true> = {
  'not-running': true,
  'idle-with-waiting-jobs': true,
  'overdue-job': true,
};
const keysOf = <K extends string>(record: Record<K, true>): K[] => Object.keys(record) as K[];

export interface DaemonMetrics {
  registry: Registry;
  setSources(sources: MetricSources): void;
  recordHttp(event: ResponseEvent): void;
  recordSync(result: SyncJobResult<SyncSummary>): void;
  recordRemoval(outcome: string): void;
  /** One webhook delivery attempt's outcome: delivered, retrying, failed. */
  recordWebhook(outcome: string): void;
  recordWorkerRestart(worker: string, reason: string): void;
  /** The workers the watchdog watches: their restart counters start at 0 for every reason. */
  watchWorkers(workers: readonly string[]): void;
  /** The start-up verdict on Redis for the removal queue (see jobs/redis-durability.ts). */
  recordRemovalGate(gate: { durable: boolean; held: boolean }): void;
}

export function createMetrics(options: { defaultMetrics?: boolean } = {}): DaemonMetrics {
  const registry = new Registry();
  if (options.defaultMetrics ?? true) collectProcessMetrics(registry);
  const registers = [registry];
  let sources: MetricSources = {};
  // The gauges read on scrape see the sources setSources plugs in later.
  const current = () => sources;

  const syncRuns = new Counter({
    name: 'user_mirror_sync_runs_total',
    help: 'Sync jobs by outcome: succeeded, partial, failed, or skipped (another sync held the mirror).',
    labelNames: ['status'] as const,
    registers,
  });
  const syncDuration = new Histogram({
    name: 'user_mirror_sync_duration_seconds',
    help: 'Duration of sync runs.',
    labelNames: ['status'] as const,
    buckets: [1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600],
    registers,
  });
  const pagesFetched = new Counter({
    name: 'user_mirror_sync_pages_fetched_total',
    help: 'List pages fetched by sync runs (the published pass of each run).',
    registers,
  });
  const usersChanged = new Counter({
    name: 'user_mirror_sync_user_changes_total',
    help: 'Users created, updated or deleted in the mirror by sync runs.',
    labelNames: ['change'] as const,
    registers,
  });
  registerMirrorGauges(registers, current);
  registerBackupGauges(registers, current);
  registerExportGauges(registers, current);
  registerFindingGauges(registers, current);
  registerDriftMetrics(registers, current);
  const httpResponses = new Counter({
    name: 'user_mirror_http_responses_total',
    help: 'Responses from the service by method, route template and status (0 = no response: network error or timeout).',
    labelNames: ['method', 'route', 'status'] as const,
    registers,
  });
  const httpDuration = new Histogram({
    name: 'user_mirror_http_request_duration_seconds',
    help: 'Service request duration by method and route template.',
    labelNames: ['method', 'route'] as const,
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers,
  });
  const removalJobs = new Counter({
    name: 'user_mirror_removal_jobs_total',
    help: 'Org-member removal job attempts by outcome.',
    labelNames: ['outcome'] as const,
    registers,
  });
  const restarts = new Counter({
    name: 'user_mirror_worker_restarts_total',
    help: 'Workers restarted by the watchdog, by worker and reason.',
    labelNames: ['worker', 'reason'] as const,
    registers,
  });
  registerRedisGauges(registers, current);

  // The label sets known at start, at 0; the HTTP families' are not (any status a service answers).
  for (const status of keysOf(SYNC_RUN_STATUSES)) {
    syncRuns.inc({ status }, 0);
    if (status !== 'skipped') syncDuration.zero({ status });
  }
  for (const change of keysOf(USER_CHANGES)) usersChanged.inc({ change }, 0);
  for (const outcome of keysOf(REMOVAL_OUTCOMES)) removalJobs.inc({ outcome }, 0);

  const webhookDeliveries = new Counter({
    name: 'user_mirror_webhook_deliveries_total',
    help: 'Webhook delivery attempts by outcome: delivered, retrying (network error, timeout, 5xx, 429), failed (any other answer).',
    labelNames: ['outcome'] as const,
    registers,
  });
  for (const outcome of keysOf(WEBHOOK_OUTCOMES)) webhookDeliveries.inc({ outcome }, 0);
  registerWebhookLagGauges(registers, current);

  const redisDurable = new Gauge({
    name: 'user_mirror_redis_durable',
    help: '1 if Redis keeps queued removals (AOF on, maxmemory-policy noeviction), 0 if it can lose them (read at start-up).',
    registers,
  });
  const removalsHeld = new Gauge({
    name: 'user_mirror_removals_held',
    help: '1 if the removal worker is not running because Redis can lose jobs and ALLOW_VOLATILE_REDIS is not set; 0 without removals (MANAGEMENT_URL unset).',
    registers,
  });

  return {
    registry,
    setSources(next) {
      sources = { ...sources, ...next };
    },
    recordHttp(e) {
      httpResponses.inc({ method: e.method, route: e.route, status: String(e.status) });
      httpDuration.observe({ method: e.method, route: e.route }, e.durationMs / 1000);
    },
    recordSync(result) {
      if (result.outcome === 'skipped') {
        syncRuns.inc({ status: 'skipped' });
        return;
      }
      const s = result.summary;
      syncRuns.inc({ status: s.status });
      syncDuration.observe({ status: s.status }, s.durationMs / 1000);
      pagesFetched.inc(s.pages);
      usersChanged.inc({ change: 'created' }, s.created);
      usersChanged.inc({ change: 'updated' }, s.updated);
      usersChanged.inc({ change: 'deleted' }, s.deleted);
    },
    recordRemoval(outcome) {
      removalJobs.inc({ outcome });
    },
    recordWebhook(outcome) {
      webhookDeliveries.inc({ outcome });
    },
    recordWorkerRestart(worker, reason) {
      restarts.inc({ worker, reason });
    },
    watchWorkers(workers) {
      for (const worker of workers) for (const reason of keysOf(RESTART_REASONS)) restarts.inc({ worker, reason }, 0);
    },
    recordRemovalGate(gate) {
      redisDurable.set(gate.durable ? 1 : 0);
      removalsHeld.set(gate.held ? 1 : 0);
    },
  };
}
