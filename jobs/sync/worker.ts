/**
 * The sync worker: takes jobs from this mirror's sync queue and runs the
 * sync engine, one at a time.
 *
 * "Never two syncs at once against one mirror" is held by two things:
 * - concurrency 1, so this process runs one sync job at a time;
 * - the SQLite sync lease (db/sync-lease.ts), so no other process (a second
 *   daemon with the same MIRROR_ID, a `sync --once` by hand) writes the same
 *   file meanwhile. A job that finds the lease taken completes as `skipped`:
 *   the sync it asked for is already running. The runner takes the lease,
 *   in the process that writes the mirror (the daemon's runs in a child
 *   process: src/sync/child-process.ts).
 *
 * Failures do not crash anything: the engine records the run (sync_runs),
 * the job fails with the engine's reason, and the next tick is the retry
 * (attempts 1, see ./contract.ts). A `partial` run completes the job: the
 * mirror did get every record that was read.
 */
import { UnrecoverableError, Worker, type ConnectionOptions, type Job } from 'bullmq';
import { logError, throttledErrorLog } from '../../src/runtime/log-error.js';
import { settleWithin } from '../../src/runtime/deadline.js';
import type { LeasedOutcome, LeaseRow } from '../../db/sync-lease.js';
import { SyncJobDataSchema, syncQueueName, type SyncJobData } from './contract.js';
import type { Logger } from 'pino';
import { withSpan } from '../../src/runtime/tracing.js';

/**
 * The part of the sync engine's SyncSummary the worker reads (the engine is
 * a peer of jobs/, so the worker names the fields it needs; the queue
 * carries the whole summary as the job's result).
 */
export interface SyncSummaryCore {
  runId: number;
  status: string;
  reason?: string;
}

/**
 * Runs one sync holding the sync lease, or reports who holds it; the daemon
 * binds the process, the engine and the config. The runner logs
 * `sync.job_started` once it holds the lease.
 */
type SyncRunner<S extends SyncSummaryCore> = (
  signal: AbortSignal,
  job: { jobId?: string; reason: string; tick: string },
) => Promise<LeasedOutcome<S>>;

export type SyncJobResult<S extends SyncSummaryCore = SyncSummaryCore> =
  { outcome: 'ran'; summary: S } | { outcome: 'skipped'; reason: 'lease-held'; heldBy: Pick<LeaseRow, 'host' | 'pid' | 'acquiredAt'> };

export interface SyncWorkerOptions<S extends SyncSummaryCore> {
  connection: ConnectionOptions;
  prefix: string;
  mirrorId: string;
  run: SyncRunner<S>;
  logger: Logger;
  /** Every job's result, failed runs included, for metrics. */
  onResult?: (result: SyncJobResult<S>) => void;
}

export interface SyncWorkerHandle<S extends SyncSummaryCore = SyncSummaryCore> {
  worker: Worker<SyncJobData, SyncJobResult<S>>;
  /** When the job in hand started (ms since the epoch); undefined when idle. */
  runningSince(): number | undefined;
  /**
   * Stops taking jobs and lets the running sync finish; shortly before
   * `timeoutMs` runs out, aborts it (the engine then discards its staging and
   * records the run as failed, leaving the mirror as it was). Resolves true
   * if everything finished in time.
   */
  close(timeoutMs: number): Promise<boolean>;
}

class SyncFailedError extends Error {
  override name = 'SyncFailedError';
}

export function startSyncWorker<S extends SyncSummaryCore>(options: SyncWorkerOptions<S>): SyncWorkerHandle<S> {
  const log = options.logger;
  let inFlight: AbortController | undefined;
  let inFlightSince: number | undefined;

  const processor = async (job: Job<SyncJobData, SyncJobResult<S>>): Promise<SyncJobResult<S>> => {
    const data = SyncJobDataSchema.safeParse(job.data);
    if (!data.success) throw new UnrecoverableError(`not a sync job: ${data.error.issues[0]?.message ?? 'invalid data'}`);
    const controller = new AbortController();
    inFlight = controller;
    inFlightSince = Date.now();
    let outcome: LeasedOutcome<S>;
    try {
      // A span for the job: the sync process it starts continues its trace (src/sync/sync-spans.ts).
      outcome = await withSpan(
        'sync job',
        { kind: 'consumer', attributes: { 'messaging.system': 'bullmq', 'messaging.message.id': job.id ?? '' } },
        () => options.run(controller.signal, { jobId: job.id, reason: data.data.reason, tick: data.data.tick }),
      );
    } finally {
      inFlight = undefined;
      inFlightSince = undefined;
    }
    if (!outcome.ran) {
      const { host, pid, acquiredAt } = outcome.heldBy;
      log.info(
        { event: 'sync.skipped', jobId: job.id, tick: data.data.tick, holder: { host, pid, since: new Date(acquiredAt).toISOString() } },
        'another sync holds this mirror; skipping this one',
      );
      const result: SyncJobResult<S> = { outcome: 'skipped', reason: 'lease-held', heldBy: { host, pid, acquiredAt } };
      options.onResult?.(result);
      return result;
    }
    const summary = outcome.value;
    const result: SyncJobResult<S> = { outcome: 'ran', summary };
    options.onResult?.(result);
    if (summary.status === 'failed') {
      throw new SyncFailedError(`sync run ${summary.runId} failed: ${summary.reason ?? 'unknown reason'}`);
    }
    return result;
  };

  const worker = new Worker<SyncJobData, SyncJobResult<S>>(syncQueueName(options.mirrorId), processor, {
    connection: options.connection,
    prefix: options.prefix,
    concurrency: 1,
    name: `sync-worker-${options.mirrorId}`,
  });

  worker.on('error', throttledErrorLog(log, { event: 'sync.worker_error', msg: 'sync worker error' }));

  worker.on('failed', (job, err) => {
    // SyncFailedError was already logged in detail by the engine.
    const level = err instanceof SyncFailedError ? 'warn' : 'error';
    logError(log, level, { event: 'sync.job_failed', jobId: job?.id, err }, 'sync job failed; the next tick retries');
  });

  return {
    worker,
    runningSince: () => inFlightSince,
    async close(timeoutMs: number): Promise<boolean> {
      const closing = worker.close();
      const graceMs = Math.min(5_000, Math.floor(timeoutMs / 4));
      if (await settleWithin(closing, timeoutMs - graceMs)) return true;
      if (inFlight !== undefined) {
        log.warn({ event: 'sync.abort_for_shutdown' }, 'sync still running at the shutdown deadline; aborting it');
        inFlight.abort(new Error('shutdown'));
      }
      return settleWithin(closing, graceMs);
    },
  };
}
