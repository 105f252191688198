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
import { assessStaleness, type MirrorFigures, type Staleness } from '../health/staleness.js';
import type { WebhookLagFacts } from './change-delivery.js';
import type { CheckpointMode } from '../../db/open.js';
import type { WalIndexFigures } from '../../db/wal-index.js';
import type { BackupVerdict } from '../health/backup-folder.js';
import type { ExportVerdict } from '../export/scheduled.js';
import type { RunFindings } from '../../db/run-findings.js';
import type { DriftPair, RunFieldWarning } from '../../db/schema-drift.js';
import { walVerdict } from '../health/wal-verdict.js';

export interface QueueDepth {
  queue: 'sync' | 'removals' | 'removals_unbound' | 'webhooks';
  state: string;
  count: number;
}

/** Where scrape-time state comes from; the daemon plugs these in once it has them. */
export interface MetricSources {
  mirror?: () => MirrorFigures;
  /** SYNC_STALE_AFTER_MS as resolved (see src/health/staleness.ts); without it no staleness gauges. */
  staleAfterMs?: number;
  queues?: () => Promise<QueueDepth[]>;
  redisUp?: () => Promise<boolean>;
  /** Webhook delivery's lag (src/daemon/change-delivery.ts); absent without WEBHOOK_URL. */
  webhookLag?: () => Promise<WebhookLagFacts>;
  /** The mirror file's and its WAL's sizes, and the WAL index's frames (db/wal-index.ts), read on scrape. */
  files?: () => { mirrorBytes: number; walBytes: number; walIndex?: WalIndexFigures | undefined };
  /** MIRROR_CHECKPOINTS: who checkpoints the WAL. */
  checkpoints?: CheckpointMode;
  /** The last checkpoint after a sync, and whether it failed (src/sync/attempt-record.ts); undefined: none yet. */
  checkpoint?: () => { walFrames: number; copiedFrames: number; failed: boolean } | undefined;
  /** The scheduled backups' verdict (src/health/backup-folder.ts); absent without BACKUP_DIR. */
  backups?: () => BackupVerdict;
  /** The scheduled exports' verdict (src/export/scheduled.ts); absent without EXPORT_DIR. */
  exports?: () => ExportVerdict;
  /** MIRROR_WAL_WARN_BYTES; undefined: the default, half the mirror (walVerdict). */
  walWarnBytes?: number | undefined;
  /** Whether the last sync attempt failed, as `status` decides it (lastFailedAttempt). */
  lastAttemptFailed?: () => boolean;
  /** Free bytes on the file system holding MIRROR_DB (db/disk-space.ts); undefined when it cannot be read. */
  diskFree?: () => number | undefined;
  /** What became of MIRROR_DB under the running daemon (src/daemon/mirror-watch.ts); undefined while it is the file opened. */
  mirrorLost?: () => 'deleted' | 'replaced' | undefined;
  /** The newest published run's rejected records and standing identity conflicts (db/run-findings.ts). */
  findings?: () => RunFindings | undefined;
  /** Schema drift in the mirror (drift-metrics.ts). */
  schemaDrift?: DriftSource;
  /** Why the removal audit cannot be written now, or undefined (src/runtime/writable-file.ts). */
  audit?: () => string | undefined;
  /** WEBHOOK_LAG_WARN_SECONDS. */
  webhookLagWarnSeconds?: number;
}

/** What the schema drift metrics read (drift-metrics.ts): plugged in by the daemon once its mirror is open (mirror-sources.ts). */
export interface DriftSource {
  /** The newest published run when the daemon opened the mirror: runs up to it are not counted. */
  startRunId: number;
  since(afterRunId: number): { lastRunId: number; counts: RunFieldWarning[] };
  pairs(limit: number): DriftPair[];
}

/** The sources as they are now: the daemon plugs more in after the gauges exist. */
export type CurrentSources = () => MetricSources;

const SCRAPE_BUDGET_MS = 2_000;
export const MIRROR_CACHE_MS = 1_000;

/** What `read` answers within the scrape budget; undefined when it failed or took longer. */
export async function readWithinBudget<T>(read: () => Promise<T>): Promise<T | undefined> {
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
  const sourceAge = new Gauge({
    name: 'user_mirror_source_data_age_seconds',
    help:
      'On a follower (docs/followers.md): seconds since its data was read from the service, at its source (the leader), ' +
      "labelled with the leader's epoch. No series on a mirror that reads the service itself.",
    labelNames: ['epoch'] as const,
    registers,
    collect() {
      // Labelled so that a mirror that is no follower has no series at all, not a misleading 0.
      sourceAge.reset();
      const s = readStaleness();
      const epoch = readMirror()?.sourceEpoch;
      if (s?.sourceAgeSeconds != null && epoch !== undefined) sourceAge.set({ epoch }, s.sourceAgeSeconds);
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
  // The threshold beside the size, so an alert compares the two as `status` does (contrib/prometheus/).
  const walWarn = new Gauge({
    name: 'user_mirror_wal_warn_bytes',
    help: 'The WAL size above which status exits 1: MIRROR_WAL_WARN_BYTES, or by default half the mirror (at least 64 MiB).',
    registers,
    collect() {
      const f = current().files?.();
      if (f !== undefined) walWarn.set(walVerdict(f, current().walWarnBytes).warnAtBytes);
    },
  });
  const lastAttemptFailed = new Gauge({
    name: 'user_mirror_sync_last_attempt_failed',
    help: 'Whether the last sync attempt failed (its run row, or an attempt that left none: <MIRROR_DB>-attempt.json): 1 until a later attempt does not.',
    registers,
    collect() {
      const read = current().lastAttemptFailed;
      if (read === undefined) return;
      try {
        lastAttemptFailed.set(read() ? 1 : 0);
      } catch {
        // A closed or locked database during shutdown: leave the last value.
      }
    },
  });
  const diskFree = new Gauge({
    name: 'user_mirror_disk_free_bytes',
    help: 'Free bytes on the file system holding MIRROR_DB. Readers answer at 0; syncs, checkpoints and history stop. `status` warns below MIRROR_DISK_WARN_BYTES.',
    registers,
    collect() {
      const free = current().diskFree?.();
      if (free !== undefined) diskFree.set(free);
    },
  });
  const lost = new Gauge({
    name: 'user_mirror_mirror_file_lost',
    help: '1 when MIRROR_DB was deleted or replaced under the running daemon (it then syncs no more; restart it once the file is restored), else 0.',
    labelNames: ['reason'] as const,
    registers,
    collect() {
      const sources = current();
      if (sources.mirrorLost === undefined) return;
      const reason = sources.mirrorLost();
      lost.set({ reason: 'deleted' }, reason === 'deleted' ? 1 : 0);
      lost.set({ reason: 'replaced' }, reason === 'replaced' ? 1 : 0);
    },
  });
  const walPending = new Gauge({
    name: 'user_mirror_wal_pending_bytes',
    help:
      "Bytes of the mirror's WAL not yet copied into the mirror file (from the WAL index; absent when none is open). " +
      "With MIRROR_CHECKPOINTS=external the WAL file keeps its largest size: this, not the file's size, grows when nobody (Litestream) checkpoints.",
    registers,
    collect() {
      walPending.reset();
      const f = current().files?.();
      if (f === undefined) return;
      if (f.walBytes === 0) walPending.set(0);
      else if (f.walIndex !== undefined) walPending.set(f.walIndex.pendingBytes);
    },
  });
  const external = new Gauge({
    name: 'user_mirror_checkpoints_external',
    help: '1 when MIRROR_CHECKPOINTS=external: Litestream owns the WAL checkpoints, and the checkpoint gauges describe none of ours.',
    registers,
    collect() {
      external.set(current().checkpoints === 'external' ? 1 : 0);
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
