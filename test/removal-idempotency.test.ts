/**
 * Removals are idempotent: duplicates collapse, a repeat after completion
 * does no second delete, and 404 means "already removed".
 * Real Redis (its own redis-server) and the stand-in; no mocks.
 */
import { hostname } from 'node:os';
import { describe, expect, it } from 'vitest';
import { enqueueMemberRemoval } from '../jobs/removals/producer.js';
import { deleteRequests, useRemovalRig, type Rig } from './support/removal-rig.js';
import { eventually } from './support/eventually.js';

let rig: Rig;
useRemovalRig((_shared, r) => {
  rig = r;
});

describe('idempotent removals', () => {
  it('collapses requests for the same member while one is pending or running into one job', async () => {
    await rig.startWorker();
    // Slow answers keep the job running while more requests arrive.
    rig.standIn.faults.set({ latencyMs: 400 });
    const m = rig.member();

    const burst = await Promise.all(Array.from({ length: 5 }, () => enqueueMemberRemoval(rig.queue, m)));
    const jobId = burst[0]?.jobId ?? '';
    expect(new Set(burst.map((r) => r.jobId))).toEqual(new Set([jobId]));
    expect(burst.filter((r) => r.deduplicated)).toHaveLength(4);

    // The same member in upper case is the same removal.
    await eventually(() => rig.standIn.members.deleteCalls(m.org_id, m.member_id) === 1, 10_000, 'the DELETE to arrive', 20);
    const whileRunning = await enqueueMemberRemoval(rig.queue, { org_id: m.org_id.toUpperCase(), member_id: m.member_id.toUpperCase() });
    expect(whileRunning).toMatchObject({ jobId, deduplicated: true });

    const job = await rig.finished(jobId);
    expect(job.returnvalue).toEqual({
      status: 'succeeded',
      org_id: m.org_id,
      member_id: m.member_id,
      target: rig.target.id,
      host: hostname(),
    });
    expect(rig.standIn.members.deleteCalls(m.org_id, m.member_id)).toBe(1);
    expect(rig.standIn.members.effectiveDeletes(m.org_id, m.member_id)).toBe(1);
    expect(rig.standIn.members.has(m.org_id, m.member_id)).toBe(false);

    // Collapsed requests leave a trail: one audit row, six requests.
    await eventually(() => rig.audit.get(jobId)?.requests === 6, 10_000, 'six requests in the audit', 20);
    expect(rig.audit.list({ memberId: m.member_id })).toHaveLength(1);
    expect(rig.audit.get(jobId)).toMatchObject({ status: 'succeeded', attempts: 1, org_id: m.org_id, member_id: m.member_id });
  });

  it('accepts a request after a completed one and finishes it as already_absent, with no second effective delete', async () => {
    await rig.startWorker();
    const m = rig.member();
    const first = await enqueueMemberRemoval(rig.queue, { ...m, requested_by: 'ops:alice' });
    expect((await rig.finished(first.jobId)).returnvalue).toMatchObject({ status: 'succeeded' });

    const second = await enqueueMemberRemoval(rig.queue, { ...m, requested_by: 'ops:bob' });
    expect(second.deduplicated).toBe(false);
    expect(second.jobId).not.toBe(first.jobId);
    const job = await rig.finished(second.jobId);
    expect(await job.getState()).toBe('completed');
    expect(job.returnvalue).toMatchObject({ status: 'already_absent' });

    expect(rig.standIn.members.deleteCalls(m.org_id, m.member_id)).toBe(2);
    expect(rig.standIn.members.effectiveDeletes(m.org_id, m.member_id)).toBe(1);
    expect(rig.audit.get(first.jobId)).toMatchObject({ status: 'succeeded', requested_by: 'ops:alice' });
    expect(rig.audit.get(second.jobId)).toMatchObject({ status: 'already_absent', requested_by: 'ops:bob' });
  });

  it('counts a 404 for a member that is not there as success (already_absent), without retrying', async () => {
    await rig.startWorker();
    const ghost = { org_id: crypto.randomUUID(), member_id: crypto.randomUUID() };
    const { jobId } = await enqueueMemberRemoval(rig.queue, ghost);
    const job = await rig.finished(jobId);
    expect(await job.getState()).toBe('completed');
    expect(job.returnvalue).toMatchObject({ status: 'already_absent' });
    // BullMQ counts the successful attempt too: one attempt, no retry.
    expect(job.attemptsMade).toBe(1);
    expect(job.attemptsStarted).toBe(1);
    expect(deleteRequests(rig.standIn, ghost.member_id)).toBe(1);
    expect(rig.audit.get(jobId)).toMatchObject({ status: 'already_absent', attempts: 1, last_error: null });
    expect(rig.audit.get(jobId)?.finished_at).not.toBeNull();
  });

  it('removes many different members in parallel, each exactly once', async () => {
    await rig.startWorker({ concurrency: 16 });
    const members = Array.from({ length: 100 }, () => rig.member());
    const jobs = await Promise.all(members.map((m) => enqueueMemberRemoval(rig.queue, m)));
    for (const { jobId } of jobs) await rig.finished(jobId);
    for (const m of members) expect(rig.standIn.members.effectiveDeletes(m.org_id, m.member_id)).toBe(1);
    expect(rig.audit.list({ status: 'succeeded' })).toHaveLength(100);
  });
});
