/**
 * The sync queue as the daemon opens it, and a tick's add (the contract,
 * and why ticks fold into a waiting job, are ./contract.ts).
 */
import { Queue, type ConnectionOptions } from 'bullmq';
import { SYNC_JOB, SYNC_JOB_OPTIONS, syncJobId, syncQueueName, type SyncJobData } from './contract.js';

export interface SyncQueueOptions {
  connection: ConnectionOptions;
  prefix: string;
  mirrorId: string;
}

export function createSyncQueue(options: SyncQueueOptions): Queue<SyncJobData> {
  return new Queue<SyncJobData>(syncQueueName(options.mirrorId), {
    connection: options.connection,
    prefix: options.prefix,
    defaultJobOptions: SYNC_JOB_OPTIONS,
  });
}

export type EnqueueOutcome =
  /** This job is in the queue (added now, or by a peer that saw the same tick). */
  | { outcome: 'enqueued'; jobId: string }
  /** Another sync job was already waiting; this tick folded into it (`into`). */
  | { outcome: 'coalesced'; jobId: string; into: string };

/** Jobs that have not started: the ones a new tick would only queue behind. */
const NOT_STARTED = ['wait', 'prioritized', 'delayed'] as const;

/**
 * Adds the job for `tick`, unless another sync job is already waiting (the
 * tick folds into it). An add whose id already exists is a no-op (a peer saw
 * the same tick first); BullMQ does not tell that apart from adding it, so
 * neither does this.
 */
export async function enqueueSync(queue: Queue<SyncJobData>, data: SyncJobData): Promise<EnqueueOutcome> {
  const jobId = syncJobId(data.reason, new Date(data.tick));
  const [waiting] = await queue.getJobs([...NOT_STARTED], 0, 0, true);
  if (waiting?.id !== undefined && waiting.id !== jobId) return { outcome: 'coalesced', jobId, into: waiting.id };
  await queue.add(SYNC_JOB, data, { ...SYNC_JOB_OPTIONS, jobId });
  return { outcome: 'enqueued', jobId };
}
