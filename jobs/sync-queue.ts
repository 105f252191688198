/**
 * The sync queue: one per mirror. Its name carries MIRROR_ID, so daemons on
 * different hosts, each with its own SQLite file, keep their own mirror fresh
 * while sharing one Redis (and the removal queue, which stays shared).
 *
 * Daemons that share a MIRROR_ID share the queue. Each of them ticks; the job
 * id is derived from the tick, so BullMQ's id dedup turns N adds into one job
 * (an add whose id already exists is a no-op). That only holds while the job
 * is still in Redis, hence completed and failed jobs are kept for a day
 * rather than removed at once.
 *
 * Ticks never pile up behind a slow or stuck run: every add carries one
 * fixed deduplication id per queue (BullMQ `deduplication` with
 * `keepLastIfActive`). While a sync job waits, later adds fold into it;
 * while one runs, the latest add is kept aside and becomes the one waiting
 * job when the running one finishes. So a mirror has at most one job running
 * and one waiting, however many ticks (or daemons) add. The id dedup above
 * still decides between peers adding the same tick.
 *
 * Attempts are 1: a failed sync is recorded by the engine, and the next tick
 * is the retry. Retrying a full directory scan at once rarely helps (the
 * service was just down) and would compete with the next tick.
 */
import { Queue, type ConnectionOptions, type JobsOptions } from 'bullmq';
import { z } from 'zod';

export const SYNC_JOB_NAME = 'sync';

/** Keep finished jobs long enough that a late duplicate add of the same tick still finds them. */
const KEEP_FINISHED = { age: 24 * 3600, count: 1000 } as const;

export const SYNC_JOB_OPTIONS: JobsOptions = {
  attempts: 1,
  removeOnComplete: KEEP_FINISHED,
  removeOnFail: KEEP_FINISHED,
};

/** The deduplication id every sync job carries; BullMQ scopes it to the queue, hence to the mirror. */
export const SYNC_DEDUP_ID = 'next-sync';

export function syncQueueName(mirrorId: string): string {
  return `sync-${mirrorId}`;
}

export const SyncJobDataSchema = z.object({
  /** Why the job exists: a cron tick, or the start-up catch-up of a stale mirror. */
  reason: z.enum(['schedule', 'startup']),
  /** The cron slot the job belongs to (ISO 8601, UTC). */
  tick: z.iso.datetime(),
});
export type SyncJobData = z.infer<typeof SyncJobDataSchema>;

/**
 * The job id for a tick: the same for every daemon that sees the tick, and
 * free of ':' (BullMQ rejects custom ids with one) and of pure digits (it
 * rejects integer-looking ids). Start-up catch-ups get their own prefix so a
 * finished or failed tick job of the same slot does not swallow them.
 */
export function syncJobId(reason: SyncJobData['reason'], tick: Date): string {
  const stamp = tick.toISOString().replace(/\.\d{3}Z$/, 'Z').replace(/[-:]/g, '');
  return `${reason === 'schedule' ? 'tick' : 'catchup'}-${stamp}`;
}

export interface SyncQueueOptions {
  connection: ConnectionOptions;
  prefix: string;
  mirrorId: string;
}

export function openSyncQueue(options: SyncQueueOptions): Queue<SyncJobData> {
  return new Queue<SyncJobData>(syncQueueName(options.mirrorId), {
    connection: options.connection,
    prefix: options.prefix,
    defaultJobOptions: SYNC_JOB_OPTIONS,
  });
}

export type EnqueueOutcome =
  /** This job is in the queue (added now, or by a peer that saw the same tick). */
  | { outcome: 'enqueued'; jobId: string }
  /** Another sync job was waiting or running; this add folded into it (`into`). */
  | { outcome: 'coalesced'; jobId: string; into: string };

/**
 * Adds the job for `tick`, unless a sync job is already waiting (the add
 * folds into it) or running (the add becomes the one job that runs after
 * it). An add whose id already exists is a no-op (a peer saw the same tick
 * first); BullMQ does not tell that apart from adding it, so neither does
 * this.
 */
export async function enqueueSync(queue: Queue<SyncJobData>, data: SyncJobData): Promise<EnqueueOutcome> {
  const jobId = syncJobId(data.reason, new Date(data.tick));
  const job = await queue.add(SYNC_JOB_NAME, data, {
    ...SYNC_JOB_OPTIONS,
    jobId,
    deduplication: { id: SYNC_DEDUP_ID, keepLastIfActive: true },
  });
  // A deduplicated add answers with the id of the job that holds the deduplication id.
  return job.id === undefined || job.id === jobId ? { outcome: 'enqueued', jobId } : { outcome: 'coalesced', jobId, into: job.id };
}
