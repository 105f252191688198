/**
 * BullMQ classes for the removal and webhook queues that survive a job hash BullMQ
 * cannot read. BullMQ 6.7 parses a job's `opts`, `progress` and `parent`
 * while it moves the job to active, and its `data` in `Job.fromJSON`. When
 * either throws inside the worker's fetch, the job is already active under
 * this worker's lock, the error is only emitted, and the stalled checker
 * re-queues the job every stalled interval, forever: it holds a concurrency
 * slot and never fails. Readers (`getJob`, `getFailed`) throw too, so
 * `removals --failed` could not list it.
 *
 * Here:
 * - data that is not JSON becomes an `UnreadableJob` marker in `fromJSON`
 *   (./unreadable-job.ts);
 * - a fetch that throws on the job's other fields quarantines the job it
 *   just took (found by this fetch's lock token): each unreadable field is
 *   moved aside to `raw:<field>` in the same hash, replaced by what BullMQ
 *   reads when the field is absent, and the data becomes
 *   `{"$unreadable": [reasons]}`, the original data kept as `raw:data`.
 *   The job then reaches the processor, which fails it once, with the
 *   reason; every later reader can read it.
 *
 * The override points are `QueueBase.Job` (documented by BullMQ as the hook
 * "to easily extend Job class calls") and the protected `Worker.moveToActive`.
 */
import { Job, Queue, Worker, type JobProgress, type WorkerOptions, type Processor } from 'bullmq';
import type { RedisClient } from './redis-connection.js';
import { isJson, JSON_FIELDS, QUARANTINE_KEY, unreadableField, unreadableFromData, type JsonField } from './unreadable-job.js';

type FromJson = typeof Job.fromJSON;

class TolerantJob<T = unknown, R = unknown, N extends string = string, P extends JobProgress = JobProgress> extends Job<T, R, N, P> {
  static override fromJSON<T = unknown, R = unknown, N extends string = string>(
    queue: Parameters<FromJson>[0],
    json: Parameters<FromJson>[1],
    jobId?: string,
  ): Job<T, R, N> {
    const unreadable = unreadableFromData(json.data);
    if (unreadable === undefined) return super.fromJSON<T, R, N>(queue, json, jobId);
    const job = super.fromJSON<T, R, N>(queue, { ...json, data: 'null' }, jobId);
    // Typed as T for BullMQ's sake; every reader of removal jobs treats data as unknown.
    job.data = unreadable as T;
    return job;
  }
}

export class TolerantWorker<T = unknown, R = unknown, N extends string = string> extends Worker<T, R, N> {
  /** The connection BullMQ was given: the quarantine reads and rewrites the job hash through it. */
  private readonly redis: RedisClient;

  constructor(name: string, processor: Processor<T, R, N>, opts: WorkerOptions & { connection: RedisClient }) {
    super(name, processor, opts);
    this.redis = opts.connection;
  }

  protected override get Job(): typeof Job {
    return TolerantJob;
  }

  protected override async moveToActive(token: string, name?: string): Promise<Job<T, R, N>> {
    try {
      return await super.moveToActive(token, name);
    } catch (err) {
      if (!(err instanceof SyntaxError)) throw err;
      const jobId = await quarantineJobLockedBy(this.redis, this.toKey.bind(this), token);
      if (jobId === undefined) throw err;
      const job = await this.Job.fromId<T, R, N>(this, jobId);
      if (job === undefined) throw err;
      job.token = token;
      return job;
    }
  }
}

export class TolerantQueue<T = unknown, R = unknown, N extends string = string> extends Queue<T, R, N> {
  protected override get Job(): typeof Job {
    return TolerantJob;
  }
}

/**
 * Finds the active job whose lock holds `token` (the one this fetch just
 * took; nobody else can hold that token) and rewrites its unreadable
 * fields as described above. Undefined when no such job is found or it has
 * nothing unreadable (then the error was something else).
 */
async function quarantineJobLockedBy(redis: RedisClient, key: (type: string) => string, token: string): Promise<string | undefined> {
  const active = await redis.lrange(key('active'), 0, -1);
  for (const id of active) {
    if ((await redis.get(`${key(id)}:lock`)) !== token) continue;
    const hash = await redis.hgetall(key(id));
    const bad = (Object.keys(JSON_FIELDS) as JsonField[]).filter((f) => !isJson(hash[f]));
    if (bad.length === 0) return undefined;
    const problems = bad.map((f) => unreadableField(f, hash[f] ?? ''));
    const update: Record<string, string> = { data: JSON.stringify({ [QUARANTINE_KEY]: problems }) };
    if (hash.data !== undefined) update['raw:data'] = hash.data;
    for (const field of bad) {
      update[`raw:${field}`] = hash[field] ?? '';
      const replacement = JSON_FIELDS[field];
      if (field !== 'data' && replacement !== undefined) update[field] = replacement;
    }
    const multi = redis.multi().hset(key(id), update);
    if (bad.includes('parent')) multi.hdel(key(id), 'parent');
    await multi.exec();
    return id;
  }
  return undefined;
}
