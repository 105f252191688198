/**
 * The daemon's gauges of state read on scrape (users in the mirror, the last
 * successful sync, the mirror's files, queue depths, Redis reachability,
 * webhook lag), kept apart from the counters of events (metrics.ts): after a
 * restart a counter starts from zero but the mirror and the queues do not,
 * so these are read afresh from where the state lives, every scrape.
 *
 * Everything on scrape is bounded in time: a scrape during a Redis outage
 * answers promptly with `user_mirror_redis_up 0` and no queue gauges rather
 * than hanging until Prometheus gives up.
 */
import { Gauge, type Registry } from 'prom-client';
import type { Queue } from 'bullmq';
import { settleWithin } from '../runtime/deadline.js';
import { assessStaleness, type MirrorFigures, type Staleness } from './staleness.js';
import type { WebhookLagFacts } from './change-delivery.js';
import type { RunFindings } from '../../db/run-findings.js';
import { DEFAULT_WEBHOOK_LAG_WARN_SECONDS } from './status-findings.js';

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
  /** The newest published run's rejected records and standing identity conflicts (db/run-findings.ts). */
  findings?: () => RunFindings | undefined;
  /** Why the removal audit cannot be written now, or undefined (src/runtime/writable-file.ts). */
  audit?: () => string | undefined;
  /** WEBHOOK_LAG_WARN_SECONDS. */
  webhookLagWarnSeconds?: number;
}

/** The sources as they are now: the daemon plugs more in after the gauges exist. */
type CurrentSources = () => MetricSources;

const SCRAPE_BUDGET_MS = 2_000;
const MIRROR_CACHE_MS = 1_000;

/** What `read` answers within the scrape budget; undefined when it failed or took longer. */
async function readWithinBudget<T>(read: () => Promise<T>): Promise<T | undefined> {
  let value: T | undefined;
  const done = read().then(
    (v) => void (value = v),
    () => undefined,
  );
  return (await settleWithin(done, SCRAPE_BUDGET_MS)) ? value : undefined;
}

/** The mirror's state: the last success, staleness, users, its files and the last checkpoint. */
export function registerMirrorGauges(registers: Registry[], current: CurrentSources): void {
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
      const staleAfterMs = current().staleAfterMs;
      if (staleAfterMs !== undefined) staleAfter.set(staleAfterMs / 1000);
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
      const f = current().files?.();
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
      const c = current().checkpoint?.();
      if (c !== undefined) checkpointHeld.set(Math.max(0, c.walFrames - c.copiedFrames));
    },
  });
  const checkpointFailed = new Gauge({
    name: 'user_mirror_checkpoint_failed',
    help: 'Whether the last WAL checkpoint after a sync failed (a full disk): 1 until one succeeds; each sync retries it first.',
    registers,
    collect() {
      const c = current().checkpoint?.();
      if (c !== undefined) checkpointFailed.set(c.failed ? 1 : 0);
    },
  });

  function readStaleness(): Staleness | undefined {
    const m = readMirror();
    const staleAfterMs = current().staleAfterMs;
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
      figures = current().mirror?.();
    } catch {
      // A closed or locked database during shutdown: leave the last values.
      figures = undefined;
    }
    cached = { at: now, figures };
    return figures;
  }
}

/** What `status` judges beyond the mirror's age: the newest run's findings, and the removal audit. */
export function registerFindingGauges(registers: Registry[], current: CurrentSources): void {
  let cached: { at: number; findings: RunFindings | undefined } | undefined;
  const readFindings = (): RunFindings | undefined => {
    const now = Date.now();
    if (cached !== undefined && now - cached.at < MIRROR_CACHE_MS) return cached.findings;
    let findings: RunFindings | undefined;
    try {
      findings = current().findings?.();
    } catch {
      findings = undefined;
    }
    cached = { at: now, findings };
    return findings;
  };
  const conflicts = new Gauge({
    name: 'user_mirror_identity_conflicts',
    help: 'Identity conflicts of the newest published sync run whose losing id the mirror does not hold as the service listed it (resolve exits 3 for a listed client_user_id); 0 when none.',
    registers,
    collect() {
      const f = readFindings();
      if (current().findings !== undefined) conflicts.set(f?.standing ?? 0);
    },
  });
  const rejected = new Gauge({
    name: 'user_mirror_rejected_records',
    help: 'Records the newest published sync run listed but did not store (no valid identity, or above SYNC_MAX_RECORD_BYTES); ids in rejected_records.',
    registers,
    collect() {
      const f = readFindings();
      if (current().findings !== undefined) rejected.set(f?.rejected ?? 0);
    },
  });
  const audit = new Gauge({
    name: 'user_mirror_audit_writable',
    help: "Whether the removal audit (AUDIT_DB) can be written now: 0 when read-only, not this account's, or its disk full (a removal worker then holds its removals).",
    registers,
    collect() {
      const read = current().audit;
      if (read !== undefined) audit.set(read() === undefined ? 1 : 0);
    },
  });
}

/** What Redis holds: the queues' depths, and whether it answers at all. */
export function registerRedisGauges(registers: Registry[], current: CurrentSources): void {
  const queueJobs = new Gauge({
    name: 'user_mirror_queue_jobs',
    help: 'Jobs in the sync and removal queues by state (read from Redis on scrape).',
    labelNames: ['queue', 'state'] as const,
    registers,
    async collect() {
      queueJobs.reset();
      const read = current().queues;
      if (read === undefined) return;
      const depths = await readWithinBudget(read);
      for (const d of depths ?? []) queueJobs.set({ queue: d.queue, state: d.state }, d.count);
    },
  });
  const redisUp = new Gauge({
    name: 'user_mirror_redis_up',
    help: '1 if Redis answered a PING during this scrape.',
    registers,
    async collect() {
      const ping = current().redisUp;
      if (ping === undefined) return;
      const up = await readWithinBudget(ping);
      redisUp.set(up === true ? 1 : 0);
    },
  });
}

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
