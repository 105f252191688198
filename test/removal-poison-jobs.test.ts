/**
 * Poison jobs: a removal job hash BullMQ cannot read or the worker cannot
 * trust (a producer in another language that wrote the job hash itself):
 * data or opts that are not JSON, fields missing. BullMQ 6.7 throws while
 * fetching such a job, leaves it active, and the stalled checker re-queues it
 * forever. Here each is failed once, with a reason, audited, listed by
 * `removals --failed`, and left alone afterwards.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createRedisConnection, type RedisClient } from '../jobs/redis-connection.js';
import { REMOVE_MEMBER_JOB } from '../jobs/removals/contract.js';
import { listFailedRemovals } from '../jobs/removals/failed.js';
import { deleteRequests, type Rig, useRemovalRig } from './support/removal-rig.js';
import { enqueueMemberRemoval } from '../jobs/removals/producer.js';
import { requireBuiltCli, runCli } from './support/cli-process.js';
import { eventually } from './support/eventually.js';

let rig: Rig;
let raw: RedisClient;
beforeAll(() => requireBuiltCli('src/commands/removals.js'));
useRemovalRig((_shared, r) => {
  rig = r;
  rig.standIn.requests.clear();
  raw = createRedisConnection(rig.redisUrl, { role: 'producer' });
});
afterEach(() => raw.disconnect());

/** What a hand-rolled producer writes: the job hash, the id on the wait list, the wake-up marker. */
async function writeForeignJob(id: string, fields: Record<string, string | undefined>): Promise<string> {
  const key = `${rig.prefix}:${rig.queue.name}`;
  const hash: Record<string, string | undefined> = {
    name: REMOVE_MEMBER_JOB,
    opts: JSON.stringify({ attempts: 5 }),
    timestamp: String(Date.now()),
    delay: '0',
    priority: '0',
    ...fields,
  };
  // `undefined` in `fields`: the producer left that field out.
  await raw.hset(`${key}:${id}`, Object.fromEntries(Object.entries(hash).filter((e): e is [string, string] => e[1] !== undefined)));
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
    expect(listed).toEqual([
      expect.objectContaining({
        job_id: 'foreign-1',
        org_id: null,
        member_id: null,
        in_queue: true,
        retryable: false,
        reason: job.failedReason,
      }),
    ]);
    const cli = await runCli(['removals', '--failed', '--json'], rig.env());
    expect(cli.code).toBe(0);
    expect(JSON.parse(cli.stdout)).toEqual([expect.objectContaining({ job_id: 'foreign-1', reason: job.failedReason })]);
    const text = await runCli(['removals', '--failed'], rig.env());
    expect(text.stdout).toMatch(/foreign-1 .*no \(invalid payload\) +.*job data is not JSON/);
  });

  it('one already past its stall limit (looping before this fix) is failed once and audited', async () => {
    // What such a job looks like after minutes of looping under BullMQ alone.
    await writeForeignJob('foreign-2', { data: '{"org_id": "3f6c', stc: '4', defa: 'job stalled more than allowable limit' });
    await rig.startWorker();
    const job = await rig.finished('foreign-2');
    expect(await job.getState()).toBe('failed');
    expect(job.failedReason).toBe('job stalled more than allowable limit');
    await eventually(() => rig.audit.get('foreign-2')?.status === 'failed', 10_000, 'the audit row', 20);
    expect(rig.audit.get('foreign-2')?.last_error).toMatch(
      /^invalid payload: job data is not JSON \(16 bytes\).*stalled more than allowable limit$/,
    );
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

/** A valid payload for the rig's target, as JSON text. */
function validData(m: { org_id: string; member_id: string }): string {
  return JSON.stringify({ target: rig.target.id, ...m });
}

describe('poison jobs of every kind', () => {
  const KINDS: Array<[string, (data: string) => Record<string, string | undefined>, RegExp]> = [
    ['opts that are not JSON', (data) => ({ data, opts: '{attempts: 5' }), /^invalid payload: job opts is not JSON \(12 bytes\)/],
    ['progress that is not JSON', (data) => ({ data, progress: 'half' }), /^invalid payload: job progress is not JSON \(4 bytes\)/],
    [
      'data and opts that are not JSON',
      () => ({ data: 'nope', opts: 'nope' }),
      /job data is not JSON \(4 bytes\).*job opts is not JSON \(4 bytes\)/,
    ],
    ['no data', () => ({ data: undefined }), /^invalid payload: target: is required.*org_id: is required/],
    ['no name', (data) => ({ data, name: undefined }), /^invalid payload: unknown job name/],
    [
      'no opts and no timestamp, data for no target',
      () => ({ opts: undefined, timestamp: undefined, data: '{"org_id":"x"}' }),
      /^invalid payload: target: is required/,
    ],
  ];

  it.each(KINDS)('%s: failed once with a reason, audited, listed, never looping', async (_kind, fields, reason) => {
    const m = rig.member();
    await writeForeignJob('poison', fields(validData(m)));
    const worker = await rig.startWorker({ lockDurationMs: 500, stalledIntervalMs: 500 });
    const errors: string[] = [];
    worker.worker.on('error', (err) => errors.push(err.message));
    const stalled: string[] = [];
    worker.worker.on('stalled', (jobId) => stalled.push(jobId));

    const job = await rig.finished('poison');
    expect(await job.getState()).toBe('failed');
    expect(job.failedReason).toMatch(reason);
    expect(rig.audit.get('poison')).toMatchObject({ status: 'failed', attempts: 1, last_error: job.failedReason });

    await sleep(2_000);
    expect(await rig.queue.getJobState('poison')).toBe('failed');
    expect((await rig.queue.getJob('poison'))?.stalledCounter).toBe(0);
    expect(stalled).toEqual([]);
    expect(errors).toEqual([]);
    expect(deleteRequests(rig.standIn)).toBe(0);
    expect(rig.standIn.members.has(m.org_id, m.member_id)).toBe(true);

    const listed = await listFailedRemovals(rig.queue, rig.audit, 10);
    expect(listed).toEqual([expect.objectContaining({ job_id: 'poison', in_queue: true, reason: job.failedReason })]);
    const text = await runCli(['removals', '--failed'], rig.env());
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/poison .*invalid payload/);
  });

  it('keeps the bytes of unreadable fields in the job hash, for whoever debugs the producer', async () => {
    const m = rig.member();
    const jobKey = await writeForeignJob('poison-kept', { data: validData(m), opts: '<opts/>' });
    await rig.startWorker();
    await rig.finished('poison-kept');
    expect(await raw.hget(jobKey, 'raw:opts')).toBe('<opts/>');
    expect(await raw.hget(jobKey, 'raw:data')).toBe(validData(m));
  });
});
