/**
 * The daemon's Prometheus metrics, in one registry of its own (never the
 * prom-client global one, so tests and a second daemon in one process do not
 * collide).
 *
 * Two kinds:
 * - events counted as they happen (sync runs, pages, HTTP responses, removal
 *   outcomes, watchdog restarts);
 * - state read on scrape (users in the mirror, the last successful sync,
 *   queue depths, Redis reachability), because after a restart a counter
 *   starts from zero but the mirror and the queues do not.
 *
 * Everything on scrape is bounded in time: a scrape during a Redis outage
 * answers promptly with `user_mirror_redis_up 0` and no queue gauges rather
 * than hanging until Prometheus gives up.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { Queue } from 'bullmq';
import type { ResponseEvent } from '../service/client.js';
import type { SyncJobResult } from '../../jobs/sync/worker.js';
import type { SyncSummary } from '../sync/engine.js';
import { settleWithin } from '../runtime/deadline.js';
import { assessStaleness, type MirrorFigures, type Staleness } from './staleness.js';
import type { WebhookLagFacts } from './change-delivery.js';

export interface QueueDepth {
  queue: 'sync' | 'removals' | 'removals_unbound' | 'webhooks';
  state: string;
  count: number;
}

/** Where scrape-time state comes from; the daemon plugs these in once it has them. */
export interface MetricSources {
  mirror?: () => MirrorFigures;
  /** SYNC_STALE_AFTER_MS as resolved (see staleness.ts); without it no staleness gauges. */
  staleAfterMs?: number;
  queues?: () => Promise<QueueDepth[]>;
  redisUp?: () => Promise<boolean>;
  /** Webhook delivery's lag (src/daemon/change-delivery.ts); absent without WEBHOOK_URL. */
  webhookLag?: () => Promise<WebhookLagFacts>;
  /** The mirror file's and its WAL's sizes, read on scrape. */
  files?: () => { mirrorBytes: number; walBytes: number };
  /** The last checkpoint after a sync, and whether it failed (src/sync/attempt-record.ts); undefined: none yet. */
  checkpoint?: () => { walFrames: number; copiedFrames: number; failed: boolean } | undefined;
}

export interface DaemonMetrics {
  registry: Registry;
  setSources(sources: MetricSources): void;
  recordHttp(event: ResponseEvent): void;
  recordSync(result: SyncJobResult<SyncSummary>): void;
  recordRemoval(outcome: string): void;
  /** One webhook delivery attempt's outcome: delivered, retrying, failed. */
  recordWebhook(outcome: string): void;
  recordWorkerRestart(worker: string, reason: string): void;
  /** The start-up verdict on Redis for the removal queue (see jobs/redis-durability.ts). */
  recordRemovalGate(gate: { durable: boolean; held: boolean }): void;
}

const SCRAPE_BUDGET_MS = 2_000;
const MIRROR_CACHE_MS = 1_000;

export function createMetrics(options: { defaultMetrics?: boolean } = {}): DaemonMetrics {
  const registry = new Registry();
  if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: registry });
  const registers = [registry];
  let sources: MetricSources = {};

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
  const lastSuccess = new Gauge({
    name: 'user_mirror_sync_last_success_timestamp_seconds',
    help: 'Unix time the last succeeded sync run finished (from the mirror; 0 if none).',
    registers,
    collect() {
      const at = readMirror()?.lastSucceededAt;
      lastSuccess.set(at === undefined ? 0 : at.getTime() / 1000);
    },
  });
  const stale = new Gauge({
    name: 'user_mirror_mirror_stale',
    help: '1 if the last succeeded sync is older than SYNC_STALE_AFTER_MS (or there never was one), else 0.',
    registers,
    collect() {
      const s = readStaleness();
      if (s !== undefined) stale.set(s.stale ? 1 : 0);
    },
  });
  const age = new Gauge({
    name: 'user_mirror_mirror_age_seconds',
    help: 'Seconds since the last succeeded sync finished (+Inf if there never was one).',
    registers,
    collect() {
      const s = readStaleness();
      if (s !== undefined) age.set(s.ageSeconds ?? Number.POSITIVE_INFINITY);
    },
  });
  const staleAfter = new Gauge({
    name: 'user_mirror_mirror_stale_after_seconds',
    help: 'SYNC_STALE_AFTER_MS in seconds: the age beyond which the mirror counts as stale.',
    registers,
    collect() {
      if (sources.staleAfterMs !== undefined) staleAfter.set(sources.staleAfterMs / 1000);
    },
  });
  const users = new Gauge({
    name: 'user_mirror_users',
    help: 'Users in the mirror, by state (active, deleted).',
    labelNames: ['state'] as const,
    registers,
    collect() {
      const m = readMirror();
      if (m === undefined) return;
      users.set({ state: 'active' }, m.activeUsers);
      users.set({ state: 'deleted' }, m.deletedUsers);
    },
  });
  const fileBytes = new Gauge({
    name: 'user_mirror_file_bytes',
    help: "Size of the mirror's files (mirror, wal). A WAL that grows across syncs means a read transaction held open keeps the checkpoint from finishing.",
    labelNames: ['file'] as const,
    registers,
    collect() {
      const f = sources.files?.();
      if (f === undefined) return;
      fileBytes.set({ file: 'mirror' }, f.mirrorBytes);
      fileBytes.set({ file: 'wal' }, f.walBytes);
    },
  });
  const checkpointHeld = new Gauge({
    name: 'user_mirror_checkpoint_frames_held',
    help: 'WAL frames the last checkpoint after a sync could not copy because a reader held them (a long read transaction); 0 when it copied all.',
    registers,
    collect() {
      const c = sources.checkpoint?.();
      if (c !== undefined) checkpointHeld.set(Math.max(0, c.walFrames - c.copiedFrames));
    },
  });
  const checkpointFailed = new Gauge({
    name: 'user_mirror_checkpoint_failed',
    help: 'Whether the last WAL checkpoint after a sync failed (a full disk): 1 until one succeeds; each sync retries it first.',
    registers,
    collect() {
      const c = sources.checkpoint?.();
      if (c !== undefined) checkpointFailed.set(c.failed ? 1 : 0);
    },
  });
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
  const queueJobs = new Gauge({
    name: 'user_mirror_queue_jobs',
    help: 'Jobs in the sync and removal queues by state (read from Redis on scrape).',
    labelNames: ['queue', 'state'] as const,
    registers,
    async collect() {
      queueJobs.reset();
      const read = sources.queues;
      if (read === undefined) return;
      let depths: QueueDepth[] | undefined;
      const done = read().then(
        (d) => {
          depths = d;
        },
        () => undefined,
      );
      if (!(await settleWithin(done, SCRAPE_BUDGET_MS))) return;
      for (const d of depths ?? []) queueJobs.set({ queue: d.queue, state: d.state }, d.count);
    },
  });
  const redisUp = new Gauge({
    name: 'user_mirror_redis_up',
    help: '1 if Redis answered a PING during this scrape.',
    registers,
    async collect() {
      const ping = sources.redisUp;
      if (ping === undefined) return;
      let up = false;
      const done = ping().then(
        (ok) => {
          up = ok;
        },
        () => undefined,
      );
      const inTime = await settleWithin(done, SCRAPE_BUDGET_MS);
      redisUp.set(inTime && up ? 1 : 0);
    },
  });

  const webhookDeliveries = new Counter({
    name: 'user_mirror_webhook_deliveries_total',
    help: 'Webhook delivery attempts by outcome: delivered, retrying (network error, timeout, 5xx, 429), failed (any other answer).',
    labelNames: ['outcome'] as const,
    registers,
  });
  // Read from Redis and the mirror on scrape, once for the three gauges.
  let lagRead: Promise<WebhookLagFacts | undefined> | undefined;
  const readLag = () => {
    lagRead ??= (async () => {
      const read = sources.webhookLag;
      if (read === undefined) return undefined;
      let lag: WebhookLagFacts | undefined;
      const done = read().then(
        (l) => void (lag = l),
        () => undefined,
      );
      return (await settleWithin(done, SCRAPE_BUDGET_MS)) ? lag : undefined;
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
    'user_mirror_webhook_failed',
    'Webhook deliveries failed for good (a 4xx answer), waiting for `user-mirror webhooks retry`.',
    (l) => l.failed,
  );

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

  function readStaleness(): Staleness | undefined {
    const m = readMirror();
    const staleAfterMs = sources.staleAfterMs;
    if (m === undefined || staleAfterMs === undefined) return undefined;
    return assessStaleness({ ...m, now: new Date(), staleAfterMs });
  }

  // Several gauges read the mirror on each scrape; the user counts are not free on a large one.
  let cached: { at: number; figures: MirrorFigures | undefined } | undefined;
  function readMirror(): MirrorFigures | undefined {
    const now = Date.now();
    if (cached !== undefined && now - cached.at < MIRROR_CACHE_MS) return cached.figures;
    let figures: MirrorFigures | undefined;
    try {
      figures = sources.mirror?.();
    } catch {
      // A closed or locked database during shutdown: leave the last values.
      figures = undefined;
    }
    cached = { at: now, figures };
    return figures;
  }

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
    recordRemovalGate(gate) {
      redisDurable.set(gate.durable ? 1 : 0);
      removalsHeld.set(gate.held ? 1 : 0);
    },
  };
}

const DEPTH_STATES = ['wait', 'prioritized', 'active', 'delayed', 'failed', 'completed'] as const;

/** Job counts per queue and state, for the queue-depth gauge. */
export async function queueDepths(queues: {
  sync: Queue;
  /** Absent when removals are off (no MANAGEMENT_URL). */
  removals?: Queue | undefined;
  removals_unbound: Queue;
  webhooks?: Queue | undefined;
}): Promise<QueueDepth[]> {
  const out: QueueDepth[] = [];
  for (const name of ['sync', 'removals', 'removals_unbound', 'webhooks'] as const) {
    const queue = queues[name];
    if (queue === undefined) continue;
    const counts = await queue.getJobCounts(...DEPTH_STATES);
    for (const state of DEPTH_STATES) out.push({ queue: name, state, count: counts[state] ?? 0 });
  }
  return out;
}
