/**
 * The removal worker: a BullMQ Worker, on one management target's queue,
 * running the `remove-member` processor (./remove-member.ts), plus the
 * bookkeeping around it: the audit, written through a group-committed
 * writer that waits out a busy audit file; audit rows for requests
 * collapsed into a pending job and for jobs BullMQ fails on its own (a
 * stall limit, a job it cannot read: ../tolerant-bullmq.ts); the `removal`
 * backoff and the limiter the 429 pause needs; outcome counters; a bounded
 * graceful close.
 *
 * Run by the daemon, when MANAGEMENT_URL and MANAGEMENT_KEY are set and
 * Redis keeps its jobs (../redis-durability.ts), under its watchdog; and on
 * its own by `user-mirror worker removals`.
 */
import { hostname } from 'node:os';
import { QueueEvents, type RateLimiterOptions, type Worker } from 'bullmq';
import { logError, throttledErrorLog } from '../../src/runtime/log-error.js';
import { groupCommittedAudit, type RemovalAudit } from '../../db/removal-audit.js';
import { DEFAULT_QUEUE_PREFIX, KEEP_COMPLETED, removalQueueName, type ManagementTarget, type RemovalResult } from './contract.js';
import { createRemovalBackoff } from './backoff.js';
import { createRemoveMemberProcessor, jobRef, type MemberRemover, type RemovalOutcome } from './remove-member.js';
import { closeWithin, settleWithin } from '../../src/runtime/deadline.js';
import { TolerantWorker } from '../tolerant-bullmq.js';
import { traceAttempt } from './removal-spans.js';
import { UnreadableJob } from '../unreadable-job.js';
import type { RedisClient } from '../redis-connection.js';
import type { Logger } from 'pino';

export interface RemovalWorkerOptions {
  /** An ioredis client (or cluster) created in the `worker` role (see ../redis-connection.ts). */
  connection: RedisClient;
  /** The management service `client` talks to: the worker takes jobs from its queue only, and performs no job for another. */
  target: ManagementTarget;
  /** QUEUE_PREFIX. */
  prefix?: string;
  client: MemberRemover;
  /** The audit trail; without it removals still run (tests, or a worker with no disk). */
  audit?: RemovalAudit;
  logger: Logger;
  /** Removals in flight at once (REMOVAL_CONCURRENCY). */
  concurrency: number;
  /** Backoff base for jobs that carry none, and for 429s without Retry-After (REMOVAL_BACKOFF_MS). */
  backoffMs?: number;
  /** How long a crashed worker keeps its jobs locked before they are recovered (REMOVAL_LOCK_MS). */
  lockDurationMs?: number;
  /** How often this worker looks for stalled jobs; defaults to the lock duration. */
  stalledIntervalMs?: number;
  /** Times a job may be recovered from a crashed worker before it is failed. */
  maxStalledCount?: number;
  /**
   * Static cap on removals per `duration`. BullMQ only honours a manual rate
   * limit (our 429 pause) when a limiter is configured, so there always is one;
   * the default is far above what the service is expected to take.
   */
  limiter?: RateLimiterOptions;
  /** How long an audit write keeps retrying a busy audit file before the job fails (default: db/busy-retry.ts). */
  auditBusyBudgetMs?: number;
  /** Record requests collapsed by deduplication in the audit (one extra Redis connection). Default: on when audited. */
  trackDuplicates?: boolean;
  /** Called once per run of a job, for metrics. */
  onOutcome?: (outcome: RemovalOutcome) => void;
  /** Shown in BullMQ as the worker's name. */
  name?: string;
}

export type RemovalCounters = Readonly<Record<RemovalOutcome, number>>;

export interface RemovalWorkerHandle {
  worker: Worker<unknown, RemovalResult, string>;
  /** Resolves once the worker is connected and fetching jobs. */
  waitUntilReady(): Promise<void>;
  /** Outcomes since start, for the daemon's metrics. */
  counters(): RemovalCounters;
  /**
   * Stops fetching, waits up to `timeoutMs` for in-flight removals, closes.
   * `drained: false` means some were still running: their locks expire and
   * another worker (or this one, restarted) takes them over; a removal is
   * idempotent, so the re-run is safe.
   */
  close(timeoutMs?: number): Promise<{ drained: boolean }>;
}

const DEFAULT_LOCK_MS = 30_000;
const DEFAULT_MAX_STALLED = 3;
export const DEFAULT_LIMITER: RateLimiterOptions = { max: 10_000, duration: 1_000 };
const STALL_LIMIT_REASON = 'stalled more than allowable limit';

export function startRemovalWorker(options: RemovalWorkerOptions): RemovalWorkerHandle {
  const { logger, audit } = options;
  const prefix = options.prefix ?? DEFAULT_QUEUE_PREFIX;
  const backoffMs = options.backoffMs ?? 1_000;
  const lockDuration = options.lockDurationMs ?? DEFAULT_LOCK_MS;
  const counts: Record<RemovalOutcome, number> = { succeeded: 0, already_absent: 0, failed: 0, retrying: 0, rate_limited: 0 };
  const onOutcome = (outcome: RemovalOutcome): void => {
    counts[outcome] += 1;
    try {
      options.onOutcome?.(outcome);
    } catch (err) {
      logError(logger, 'error', { err }, 'removal outcome callback threw');
    }
  };

  // The processor needs the worker (to rate-limit it) and the worker needs the processor.
  let worker: Worker<unknown, RemovalResult, string> | undefined;
  const auditWriter =
    audit === undefined
      ? undefined
      : groupCommittedAudit(audit, {
          budgetMs: options.auditBusyBudgetMs,
          onRetry: ({ attempt, delayMs, error }) => {
            if (attempt === 1)
              logError(logger, 'warn', { event: 'removal.audit_busy', delayMs, err: error }, 'audit database busy; retrying the write');
          },
        });
  const queueName = removalQueueName(options.target.id);
  const processor = createRemoveMemberProcessor({
    client: options.client,
    target: options.target,
    audit: auditWriter,
    logger,
    backoffBaseMs: backoffMs,
    onOutcome,
    rateLimit: async (ms) => {
      await worker?.rateLimit(ms);
    },
  });

  // Each run of a job is a span in the trace its producer started (./removal-spans.ts; nothing when tracing is off).
  const traced: typeof processor.process = (job, token, signal) =>
    traceAttempt(queueName, job, () => processor.process(job, token, signal));
  // Tolerant: a job whose data is not JSON reaches the processor and fails once (see ../tolerant-bullmq.ts).
  worker = new TolerantWorker<unknown, RemovalResult, string>(queueName, traced, {
    connection: options.connection,
    prefix,
    name: options.name ?? `${hostname()}:${process.pid}`,
    concurrency: options.concurrency,
    lockDuration,
    stalledInterval: options.stalledIntervalMs ?? lockDuration,
    maxStalledCount: options.maxStalledCount ?? DEFAULT_MAX_STALLED,
    limiter: options.limiter ?? DEFAULT_LIMITER,
    settings: { backoffStrategy: createRemovalBackoff({ defaultBaseMs: backoffMs }) },
    // Only for producers that send no removeOnComplete; failed jobs are always kept.
    removeOnComplete: KEEP_COMPLETED,
  });

  worker.on('failed', (job, err) => {
    if (processor.handled(err)) return;
    // Thrown outside the processor's own decisions (e.g. its audit write failed).
    const final = job !== undefined && job.attemptsMade >= (job.opts.attempts ?? 1);
    logError(logger, 'warn', { jobId: job?.id, err, final }, 'removal job failed');
    onOutcome(final ? 'failed' : 'retrying');
    // Failed before the processor saw it (a stall limit reached while BullMQ could not parse it): still audited.
    if (job !== undefined && job.data instanceof UnreadableJob && auditWriter !== undefined) {
      auditWriter
        .rejected(jobRef(job), { target: options.target.id }, `invalid payload: ${job.data.reason}; ${err.message}`)
        .catch((e: unknown) => {
          logError(logger, 'error', { err: e, jobId: job.id }, 'removal audit write failed (unparsable job)');
        });
    }
  });
  worker.on('stalled', (jobId) => {
    logger.warn({ jobId }, 'removal job stalled (its worker stopped); re-queued');
  });
  worker.on('error', throttledErrorLog(logger, { event: 'removals.worker_error', msg: 'removal worker error' }));

  const events =
    audit !== undefined && options.trackDuplicates !== false ? watchQueueEvents(options, queueName, prefix, audit, logger) : undefined;

  const handle: RemovalWorkerHandle = {
    worker,
    async waitUntilReady() {
      await Promise.all([worker.waitUntilReady(), events?.waitUntilReady()]);
    },
    counters: () => ({ ...counts }),
    async close(timeoutMs = 25_000) {
      const drained = await closeWithin(worker.close(), timeoutMs, (err) =>
        logError(logger, 'warn', { err }, 'removal worker close failed'),
      );
      if (!drained) logger.warn({ timeoutMs }, 'removals still in flight at shutdown timeout; their jobs will be recovered as stalled');
      // Closing QueueEvents can stall after Redis restarted under it; it must not hold up shutdown.
      if (events !== undefined) await settleWithin(events.close(), EVENTS_CLOSE_MS);
      auditWriter?.flush();
      return { drained };
    },
  };
  return handle;
}

/**
 * Reading starts a few seconds in the past rather than at "now": reading
 * from "now" misses events written between connecting and the first read,
 * and both handlers are idempotent, so replaying a few seconds is harmless.
 * Events from while no worker ran are not replayed.
 */
const EVENT_REPLAY_MS = 5_000;

/**
 * Events the worker itself never sees: requests collapsed into a pending job
 * (they leave an audit trail) and jobs BullMQ failed because they stalled too
 * often (their row must not stay `requested`).
 */
function watchQueueEvents(
  options: RemovalWorkerOptions,
  queueName: string,
  prefix: string,
  audit: RemovalAudit,
  logger: Logger,
): QueueEvents {
  const events = new QueueEvents(queueName, {
    connection: options.connection,
    prefix,
    lastEventId: `${Date.now() - EVENT_REPLAY_MS}-0`,
  });
  events.on('deduplicated', ({ jobId, deduplicationId, deduplicatedJobId }, eventId) => {
    try {
      // BullMQ 6.7's script writes the surviving job as `jobId` and the discarded one as
      // `deduplicatedJobId` (its docs say the opposite); the surviving job is the one audited.
      audit.duplicate(eventId, jobId, deduplicationId);
      logger.debug({ jobId, discarded: deduplicatedJobId, deduplicationId }, 'removal request collapsed into pending job');
    } catch (err) {
      logError(logger, 'error', { err }, 'removal audit write failed (duplicate)');
    }
  });
  events.on('failed', ({ jobId, failedReason }) => {
    if (!failedReason.includes(STALL_LIMIT_REASON)) return;
    try {
      const row = audit.get(jobId);
      if (row !== undefined && row.status === 'requested') {
        audit.attemptFailed({ jobId, enqueuedAt: row.enqueued_at }, failedReason, true);
      }
    } catch (err) {
      logError(logger, 'error', { err }, 'removal audit write failed (stalled)');
    }
  });
  events.on('error', throttledErrorLog(logger, { event: 'removals.events_error', msg: 'removal queue events error' }));
  return events;
}

const EVENTS_CLOSE_MS = 2_000;
