/**
 * A malformed payload never causes a request, let alone one for some other
 * member: the producer refuses it, and a job that reaches the queue anyway
 * (a foreign producer, a hand-written job) fails at once, unrecoverably,
 * with a reason, before any I/O.
 */
import { Queue } from 'bullmq';
import { describe, expect, it } from 'vitest';
import { InvalidRemovalRequestError, enqueueMemberRemoval } from '../jobs/removals/producer.js';
import { REMOVE_MEMBER_JOB, type RemovalRequest } from '../jobs/removals/contract.js';
import { createRedisConnection } from '../jobs/redis-connection.js';
import { deleteRequests, type Rig, useRemovalRig } from './support/removal-rig.js';

let rig: Rig;
useRemovalRig((_shared, r) => {
  rig = r;
  rig.standIn.requests.clear();
});

const ORG = '3f6c1a52-8a3e-4b8e-9d2a-0c6f7e1b2a90';
const MEMBER = '9b2d4e61-1c7f-4a0b-8e3d-5f6a7b8c9d0e';

const BAD: Array<[string, unknown, RegExp]> = [
  ['missing member_id', { org_id: ORG }, /member_id: is required/],
  ['missing both ids', {}, /org_id: is required/],
  ['a number for an id', { org_id: ORG, member_id: 12345 }, /member_id: must be a UUID/],
  ['an object for an id', { org_id: { $ne: null }, member_id: MEMBER }, /org_id: must be a UUID/],
  ['an extra field', { org_id: ORG, member_id: MEMBER, all_members: true }, /unexpected field\(s\): "all_members"/],
  ['a huge id', { org_id: ORG, member_id: 'f'.repeat(5_000) }, /member_id: must be a UUID/],
  ['a huge reason', { org_id: ORG, member_id: MEMBER, reason: 'x'.repeat(5_000) }, /reason: must be at most 1000/],
  ['a slash in an id', { org_id: `${ORG}/member/${MEMBER}`, member_id: MEMBER }, /org_id: must be a UUID/],
  ['a dot-dot id', { org_id: ORG, member_id: '..' }, /member_id: must be a UUID/],
  ['a path-walking id', { org_id: '../../v1/org/x', member_id: MEMBER }, /org_id: must be a UUID/],
  ['an array payload', [ORG, MEMBER], /\(root\)/],
  ['a string payload', 'everyone', /\(root\)/],
];

describe('the producer', () => {
  it.each(BAD)('refuses %s before anything reaches Redis', async (_name, data, reason) => {
    const attempt = enqueueMemberRemoval(rig.queue, data as RemovalRequest);
    await expect(attempt).rejects.toBeInstanceOf(InvalidRemovalRequestError);
    await expect(attempt).rejects.toThrow(reason);
    expect(await rig.queue.count()).toBe(0);
  });
});

describe('the worker', () => {
  it('fails every malformed job at once with a clear reason, and sends no request at all', async () => {
    // A producer that skips validation: raw BullMQ, as another service might.
    const raw = createRedisConnection(rig.redisUrl, { role: 'producer' });
    const foreign = new Queue(rig.queue.name, { connection: raw, prefix: rig.prefix });
    // Bound to the rig's target, so each job fails for its own fault.
    const bound = (data: unknown): unknown =>
      typeof data === 'object' && data !== null && !Array.isArray(data) ? { target: rig.target.id, ...data } : data;
    const jobs = [
      ...(await Promise.all(
        BAD.map(([, data]) => foreign.add(REMOVE_MEMBER_JOB, bound(data), { attempts: 5, backoff: { type: 'removal', delay: 20 } })),
      )),
      await foreign.add('remove-all-members', bound({ org_id: ORG, member_id: MEMBER }), { attempts: 5 }),
    ];
    await rig.startWorker();

    for (const [i, added] of jobs.entries()) {
      const job = await rig.finished(added.id ?? '');
      expect(await job.getState()).toBe('failed');
      // Unrecoverable: 5 attempts allowed, one used.
      expect(job.attemptsMade).toBe(1);
      const expected = BAD[i]?.[2] ?? /unknown job name/;
      expect(job.failedReason).toMatch(/^invalid payload: /);
      expect(job.failedReason).toMatch(expected);
      expect(job.failedReason.length).toBeLessThan(500);
      expect(rig.audit.get(added.id ?? '')).toMatchObject({ status: 'failed', attempts: 1 });
    }
    expect(deleteRequests(rig.standIn)).toBe(0);
    expect(rig.standIn.members.totalDeleteCalls()).toBe(0);
    await foreign.close();
    raw.disconnect();
  });
});
