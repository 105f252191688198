/**
 * Poison jobs: a removal job whose data is not JSON at all (a producer in
 * another language that wrote the job hash itself). BullMQ 6.7 throws while
 * fetching such a job, leaves it active, and the stalled checker re-queues it
 * forever. Here it is failed once, with a reason, audited, listed by
 * `removals --failed`, and left alone afterwards.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createRedisConnection } from '../jobs/redis-connection.js';
import { REMOVAL_QUEUE, REMOVE_MEMBER_JOB } from '../jobs/removal-queue.js';
import { listFailedRemovals } from '../jobs/failed-removals.js';
import { deleteRequests, until, type Rig, useRemovalRig } from './support/removal-rig.js';
import { enqueueMemberRemoval } from '../jobs/removal-producer.js';
import { requireBuiltCli, runCli } from './support/cli-process.js';

let rig: Rig;
let raw: Redis;
beforeAll(() => requireBuiltCli('src/commands/removals.js'));
useRemovalRig((_shared, r) => {
  rig = r;
  rig.standIn.requests.clear();
  raw = createRedisConnection(rig.redisUrl, { role: 'producer' });
});
afterEach(() => raw.disconnect());

/** What a hand-rolled producer writes: the job hash, the id on the wait list, the wake-up marker. */
async function writeForeignJob(id: string, fields: Record<string, string>): Promise<string> {
  const key = `${rig.prefix}:${REMOVAL_QUEUE}`;
  await raw.hset(`${key}:${id}`, {
    name: REMOVE_MEMBER_JOB,
    opts: JSON.stringify({ attempts: 5 }),
    timestamp: String(Date.now()),
    delay: '0',
    priority: '0',
    ...fields,
  });
  await raw.lpush(`${key}:wait`, id);
  await raw.zadd(`${key}:marker`, 0, '0');
  return `${key}:${id}`;
}

describe('a job whose data is not JSON', () => {
  it('is failed once with a clear reason, audited, listed, and never loops', async () => {
    const jobKey = await writeForeignJob('foreign-1', { data: 'not json' });
    // Short locks: a looping job would be re-queued as stalled within a second.
    const worker = await rig.startWorker({ lockDurationMs: 500, stalledIntervalMs: 500 });
    const errors: string[] = [];
    worker.worker.on('error', (err) => errors.push(err.message));
    const stalled: string[] = [];
    worker.worker.on('stalled', (jobId) => stalled.push(jobId));

    const job = await rig.finished('foreign-1');
    expect(await job.getState()).toBe('failed');
    expect(job.attemptsMade).toBe(1);
    expect(job.failedReason).toBe('invalid payload: job data is not JSON (8 bytes); a producer must send a JSON object');
    expect(rig.audit.get('foreign-1')).toMatchObject({ status: 'failed', attempts: 1, last_error: job.failedReason });

    // Several stalled-check intervals later: still failed, never re-queued, no fetch errors.
    await sleep(2_000);
    expect(await rig.queue.getJobState('foreign-1')).toBe('failed');
    expect((await rig.queue.getJob('foreign-1'))?.stalledCounter).toBe(0);
    expect(stalled).toEqual([]);
    expect(errors).toEqual([]);
    expect(deleteRequests(rig.standIn)).toBe(0);
    // The producer's bytes stay as written, for whoever debugs it.
    expect(await raw.hget(jobKey, 'data')).toBe('not json');

    const listed = await listFailedRemovals(rig.queue, rig.audit, 10);
    expect(listed).toEqual([expect.objectContaining({ job_id: 'foreign-1', org_id: null, member_id: null, in_queue: true, reason: job.failedReason })]);
    const cli = await runCli(['removals', '--failed', '--json'], rig.env());
    expect(cli.code).toBe(0);
    expect(JSON.parse(cli.stdout)).toEqual([expect.objectContaining({ job_id: 'foreign-1', reason: job.failedReason })]);
    const text = await runCli(['removals', '--failed'], rig.env());
    expect(text.stdout).toMatch(/foreign-1 .*job data is not JSON/);
  });

  it('one already past its stall limit (looping before this fix) is failed once and audited', async () => {
    // What such a job looks like after minutes of looping under BullMQ alone.
    await writeForeignJob('foreign-2', { data: '{"org_id": "3f6c', stc: '4', defa: 'job stalled more than allowable limit' });
    await rig.startWorker();
    const job = await rig.finished('foreign-2');
    expect(await job.getState()).toBe('failed');
    expect(job.failedReason).toBe('job stalled more than allowable limit');
    await until(() => rig.audit.get('foreign-2')?.status === 'failed', 'the audit row');
    expect(rig.audit.get('foreign-2')?.last_error).toMatch(/^invalid payload: job data is not JSON \(16 bytes\).*stalled more than allowable limit$/);
    expect(deleteRequests(rig.standIn)).toBe(0);
  });

  it('valid jobs behind it are processed as usual', async () => {
    await writeForeignJob('foreign-3', { data: '\u0000\u0001binary' });
    const m = rig.member();
    const { jobId } = await enqueueMemberRemoval(rig.queue, m);
    await rig.startWorker();
    expect(await (await rig.finished('foreign-3')).getState()).toBe('failed');
    expect(await (await rig.finished(jobId)).getState()).toBe('completed');
    expect(rig.standIn.members.effectiveDeletes(m.org_id, m.member_id)).toBe(1);
  });
});
