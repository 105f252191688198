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
 * Ticks never pile up behind a slow or stuck run: a tick that finds a sync
 * job already waiting folds into it instead of adding one. So a mirror has
 * at most one job waiting, and one running, however many ticks pass. Peers
 * that see the same tick both find nothing waiting and both add, but the
 * same id, so still one job. Only adds with different ids (a start-up
 * catch-up and a tick in the same instant) could both slip through the
 * check, leaving two waiting once; the next tick folds into them.
 *
 * Why not BullMQ's own `deduplication` id: it is held by the *active* job
 * as well, and a job whose daemon was killed mid-run stays active until its
 * lock expires and the stalled check returns it (up to a minute); every
 * tick of the successor would fold into that dead job meanwhile.
 *
 * Attempts are 1: a failed sync is recorded by the engine, and the next tick
 * is the retry. Retrying a full directory scan at once rarely helps (the
 * service was just down) and would compete with the next tick.
 */
import type { JobsOptions } from 'bullmq';
import { z } from 'zod';

export const SYNC_JOB = 'sync';

/** Keep finished jobs long enough that a late duplicate add of the same tick still finds them. */
const KEEP_FINISHED = { age: 24 * 3600, count: 1000 } as const;

export const SYNC_JOB_OPTIONS: JobsOptions = {
  attempts: 1,
  removeOnComplete: KEEP_FINISHED,
  removeOnFail: KEEP_FINISHED,
};

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
  const stamp = tick
    .toISOString()
    .replace(/\.\d{3}Z$/, 'Z')
    .replace(/[-:]/g, '');
  return `${reason === 'schedule' ? 'tick' : 'catchup'}-${stamp}`;
}
