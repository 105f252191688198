/**
 * BullMQ classes for the removal queue that survive job data that is not
 * JSON. BullMQ 6.7 parses `data` in `Job.fromJSON`; when that throws inside
 * the worker's fetch, the job is already active under this worker's lock,
 * the error is only emitted, and the stalled checker re-queues the job every
 * stalled interval, forever (its stall limit is enforced by the same code
 * path that cannot parse it). Readers (`getJob`, `getFailed`) throw too, so
 * `removals --failed` could not list it.
 *
 * Here such a job gets an `UnparsableJobData` in place of its data; the
 * processor rejects it like any invalid payload: failed once, audited,
 * listed. The raw text stays in Redis untouched, for whoever debugs the producer.
 *
 * The override point is `QueueBase.Job` (protected, documented by BullMQ as
 * the hook "to easily extend Job class calls").
 */
import { Job, Queue, Worker, type JobProgress } from 'bullmq';
import { parseJobData } from './unparsable-job-data.js';

type FromJson = typeof Job.fromJSON;

export class TolerantJob<T = unknown, R = unknown, N extends string = string, P extends JobProgress = JobProgress> extends Job<T, R, N, P> {
  static override fromJSON<T = unknown, R = unknown, N extends string = string>(
    queue: Parameters<FromJson>[0],
    json: Parameters<FromJson>[1],
    jobId?: string,
  ): Job<T, R, N> {
    const parsed = parseJobData(json.data);
    if (parsed.ok) return super.fromJSON<T, R, N>(queue, json, jobId);
    const job = super.fromJSON<T, R, N>(queue, { ...json, data: 'null' }, jobId);
    // Typed as T for BullMQ's sake; every reader of removal jobs treats data as unknown.
    job.data = parsed.data as T;
    return job;
  }
}

export class TolerantWorker<T = unknown, R = unknown, N extends string = string> extends Worker<T, R, N> {
  protected override get Job(): typeof Job {
    return TolerantJob;
  }
}

export class TolerantQueue<T = unknown, R = unknown, N extends string = string> extends Queue<T, R, N> {
  protected override get Job(): typeof Job {
    return TolerantJob;
  }
}
