/**
 * Removals queued before jobs named their management target: the queue
 * `member-removals` (UNBOUND_REMOVAL_QUEUE) of an older version.
 *
 * No worker takes them. Which environment a job there was meant for is
 * unknown, and guessing is how a production removal ends as a sandbox 404
 * recorded as done. They wait, and they are reported: the worker and the
 * daemon log `removals.unbound_jobs` at start-up, the daemon exports them in
 * `user_mirror_queue_jobs{queue="removals_unbound"}`, and `status` and
 * `removals` show them. An operator who knows their target moves them with
 * `user-mirror removals adopt` on a host configured for it (adoptUnbound).
 */
import type { Job, Queue } from 'bullmq';
import { logError } from '../../src/runtime/log-error.js';
import type { RedisClient } from '../redis-connection.js';
import { UNBOUND_REMOVAL_QUEUE, checkRemovalPayload, type RemovalJobPolicy } from './contract.js';
import { enqueueMemberRemoval } from './producer.js';
import { targetIdOf, type RemovalQueue } from './queue-handle.js';
import { TolerantQueue } from '../tolerant-bullmq.js';
import type { Logger } from 'pino';
import { isRecord } from '../../src/runtime/is-record.js';

const PENDING_STATES = ['waiting', 'prioritized', 'delayed', 'active', 'failed'] as const;
export type UnboundCounts = Record<(typeof PENDING_STATES)[number], number>;

/** `readOnly`: for a look (status, listings), no BullMQ meta write. */
export function openUnboundQueue(connection: RedisClient, prefix: string, readOnly = false): TolerantQueue {
  const queue = new TolerantQueue(UNBOUND_REMOVAL_QUEUE, { connection, prefix, skipMetasUpdate: readOnly });
  queue.on('error', () => undefined);
  return queue;
}

export async function countUnbound(queue: Queue): Promise<UnboundCounts> {
  const c = await queue.getJobCounts(...PENDING_STATES);
  return Object.fromEntries(PENDING_STATES.map((s) => [s, c[s] ?? 0])) as UnboundCounts;
}

/** Jobs a removal worker should be taking but no worker will. */
export function unboundTotal(c: UnboundCounts): number {
  return c.waiting + c.prioritized + c.delayed + c.active + c.failed;
}

/** Start-up report of the worker and the daemon: loud when such jobs wait, never fatal. */
export async function logUnbound(queue: Queue, logger: Logger): Promise<void> {
  try {
    const counts = await countUnbound(queue);
    if (unboundTotal(counts) > 0)
      logger.error({ event: 'removals.unbound_jobs', ...counts, fix: UNBOUND_FIX }, 'removals without a target are waiting');
  } catch (err) {
    logError(logger, 'warn', { event: 'removals.unbound_unread', err }, 'could not count removals without a target');
  }
}

export const UNBOUND_FIX =
  "removals queued by an older producer name no management target, so no worker takes them; on a host configured for the target they were meant for, run 'user-mirror removals adopt --all' (jobs/REMOVAL-QUEUE.md)";

export type AdoptResult =
  | { jobId: string; result: 'adopted'; into: string; deduplicated: boolean }
  | { jobId: string; result: 'invalid'; reason: string }
  | { jobId: string; result: 'running' }
  | { jobId: string; result: 'not_found' };

/**
 * Moves unbound jobs (one, or every one not running) into `target`'s queue:
 * enqueued there first, removed here after, so a crash in between leaves a
 * second request for the member, never none (the later one ends as
 * `already_absent`). A job whose payload is invalid stays where it is.
 */
export async function adoptUnbound(
  unbound: TolerantQueue,
  target: RemovalQueue,
  which: { jobId: string } | 'all',
  policy: RemovalJobPolicy,
): Promise<AdoptResult[]> {
  const jobs: Array<Job | string> = [];
  if (which === 'all') {
    for (const state of ['waiting', 'prioritized', 'delayed', 'failed'] as const) {
      for (let start = 0; ; start += 500) {
        const page = await unbound.getJobs([state], start, start + 499, true);
        jobs.push(...page);
        if (page.length < 500) break;
      }
    }
  } else {
    jobs.push((await unbound.getJob(which.jobId)) ?? which.jobId);
  }
  const into = targetIdOf(target);
  const results: AdoptResult[] = [];
  for (const job of jobs) {
    if (typeof job === 'string') {
      results.push({ jobId: job, result: 'not_found' });
      continue;
    }
    const jobId = job.id ?? '';
    if ((await job.getState()) === 'active') {
      results.push({ jobId, result: 'running' });
      continue;
    }
    const data: unknown = job.data;
    const named = isRecord(data) ? data.target : undefined;
    if (named !== undefined && named !== into) {
      results.push({
        jobId,
        result: 'invalid',
        reason: `names target ${(typeof named === 'string' ? named : JSON.stringify(named)).slice(0, 40)}, not this host's ${into}`,
      });
      continue;
    }
    const checked = checkRemovalPayload(isRecord(data) ? { ...data, target: into } : data);
    if (!checked.ok) {
      results.push({ jobId, result: 'invalid', reason: checked.reason });
      continue;
    }
    const { target: _bound, ...request } = checked.payload;
    const added = await enqueueMemberRemoval(target, request, { policy });
    await job.remove();
    results.push({ jobId, result: 'adopted', into: added.jobId, deduplicated: added.deduplicated });
  }
  return results;
}
