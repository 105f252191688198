/**
 * Retries stop when they should: permanent 4xx fail at once with the
 * service's detail; 5xx, resets and 429 are retried, honouring Retry-After;
 * 429 pauses the queue without burning attempts.
 */
import { describe, expect, it } from 'vitest';
import { ServiceClient } from '../src/service/client.js';
import { enqueueMemberRemoval } from '../jobs/removals/producer.js';
import { DEFAULT_LIMITER } from '../jobs/removals/worker.js';
import { deleteRequests, useRemovalRig, type Rig } from './support/removal-rig.js';
import { eventually } from './support/eventually.js';

let rig: Rig;
useRemovalRig((_shared, r) => {
  rig = r;
});

const policy = { attempts: 5, backoffMs: 20 };

describe('permanent failures', () => {
  it('fails a 422 at once, without retry, with the detail in the reason and the audit', async () => {
    await rig.startWorker();
    const m = rig.member();
    rig.standIn.faults.failNext({
      method: 'DELETE',
      status: 422,
      body: { detail: [{ loc: ['path', 'member_id'], msg: 'Input should be a valid UUID', type: 'uuid_parsing', input: 'x' }] },
    });
    const { jobId } = await enqueueMemberRemoval(rig.queue, m, { policy });
    const job = await rig.finished(jobId);

    expect(await job.getState()).toBe('failed');
    expect(job.attemptsMade).toBe(1);
    expect(job.failedReason).toContain('HTTP 422');
    expect(job.failedReason).toContain('path.member_id: Input should be a valid UUID');
    expect(rig.standIn.members.deleteCalls(m.org_id, m.member_id)).toBe(1);
    expect(rig.audit.get(jobId)).toMatchObject({ status: 'failed', attempts: 1 });
    expect(rig.audit.get(jobId)?.last_error).toContain('Input should be a valid UUID');
  });

  it('fails a 403 at once, with a plain-string detail', async () => {
    await rig.startWorker();
    const m = rig.member();
    rig.standIn.faults.failNext({ method: 'DELETE', status: 403, body: { detail: 'This key may not manage org members' } });
    const { jobId } = await enqueueMemberRemoval(rig.queue, m, { policy });
    const job = await rig.finished(jobId);
    expect(await job.getState()).toBe('failed');
    expect(job.attemptsMade).toBe(1);
    expect(job.failedReason).toContain('HTTP 403: This key may not manage org members');
  });

  it('fails a 401 (the stand-in refusing a wrong management key) at once', async () => {
    const m = rig.member();
    const client = new ServiceClient({ managementUrl: rig.standIn.managementUrl, managementKey: 'mg_wrong' });
    const wrongKey = await rig.startWorker({ client });
    const { jobId } = await enqueueMemberRemoval(rig.queue, m, { policy });
    const job = await rig.finished(jobId);
    expect(await job.getState()).toBe('failed');
    expect(job.attemptsMade).toBe(1);
    expect(job.failedReason).toContain('HTTP 401: Missing or invalid API key');
    expect(rig.standIn.members.has(m.org_id, m.member_id)).toBe(true);
    await wrongKey.close(1_000);
    await client.close();
  });

  it('fails after REMOVAL_ATTEMPTS when the service keeps answering 503', async () => {
    await rig.startWorker();
    const m = rig.member();
    rig.standIn.faults.failNext({ method: 'DELETE', status: 503, times: 3 });
    const { jobId } = await enqueueMemberRemoval(rig.queue, m, { policy: { attempts: 3, backoffMs: 20 } });
    const job = await rig.finished(jobId);
    expect(await job.getState()).toBe('failed');
    expect(job.attemptsMade).toBe(3);
    expect(job.failedReason).toContain('HTTP 503');
    expect(deleteRequests(rig.standIn, m.member_id)).toBe(3);
    expect(rig.audit.get(jobId)).toMatchObject({ status: 'failed', attempts: 3 });
  });
});

describe('retryable failures', () => {
  it('retries 503s, waiting out their Retry-After', async () => {
    await rig.startWorker();
    const m = rig.member();
    rig.standIn.faults.failNext({ method: 'DELETE', status: 503, times: 2, retryAfter: 1 });
    const { jobId } = await enqueueMemberRemoval(rig.queue, m, { policy });
    const job = await rig.finished(jobId);

    expect(await job.getState()).toBe('completed');
    expect(job.returnvalue).toMatchObject({ status: 'succeeded' });
    expect(job.attemptsMade).toBe(3);
    // Our own backoff would have waited ~20-40 ms; the two 1 s Retry-Afters set the pace.
    expect((job.finishedOn ?? 0) - job.timestamp).toBeGreaterThanOrEqual(2_000);
    expect(rig.standIn.members.effectiveDeletes(m.org_id, m.member_id)).toBe(1);
    expect(rig.audit.get(jobId)).toMatchObject({ status: 'succeeded', attempts: 3 });
    expect(rig.audit.get(jobId)?.last_error).toContain('HTTP 503');
  });

  it('retries a 500 without Retry-After and a connection reset quickly', async () => {
    await rig.startWorker();
    const m = rig.member();
    rig.standIn.faults.failNext({ method: 'DELETE', status: 500 });
    rig.standIn.faults.failNext({ method: 'DELETE', fault: 'reset' });
    const { jobId } = await enqueueMemberRemoval(rig.queue, m, { policy });
    const job = await rig.finished(jobId);
    expect(await job.getState()).toBe('completed');
    expect(job.attemptsMade).toBe(3);
    expect((job.finishedOn ?? 0) - job.timestamp).toBeLessThan(2_000);
    expect(rig.standIn.members.effectiveDeletes(m.org_id, m.member_id)).toBe(1);
  });

  it('handles 429 through the rate limiter: the queue pauses for Retry-After and no attempt is burnt', async () => {
    await rig.startWorker();
    const a = rig.member();
    const b = rig.member();
    // Only A's requests are refused, so B's run shows the pause, not a 429 of its own.
    rig.standIn.faults.failNext({ method: 'DELETE', pathPrefix: `/v1/org/${a.org_id}/`, status: 429, times: 2, retryAfter: 1 });
    const jobA = await enqueueMemberRemoval(rig.queue, a, { policy: { attempts: 2, backoffMs: 20 } });
    // With `max`, only a limit in force counts, not the limiter's ordinary counting window.
    await eventually(async () => (await rig.queue.getRateLimitTtl(DEFAULT_LIMITER.max)) > 0, 10_000, 'the queue to be rate limited', 20);
    const rateLimitedAt = Date.now();
    // Another member's removal waits too: the pause is for the whole queue.
    const jobB = await enqueueMemberRemoval(rig.queue, b, { policy });

    const doneA = await rig.finished(jobA.jobId);
    const doneB = await rig.finished(jobB.jobId);
    expect(await doneA.getState()).toBe('completed');
    expect(doneA.returnvalue).toMatchObject({ status: 'succeeded' });
    // Two 429s with attempts: 2 would have failed the job had they counted.
    expect(doneA.attemptsMade).toBe(1);
    expect(doneA.attemptsStarted).toBe(3);
    expect((doneA.finishedOn ?? 0) - doneA.timestamp).toBeGreaterThanOrEqual(1_900);
    expect((doneB.processedOn ?? 0) - rateLimitedAt).toBeGreaterThanOrEqual(800);
    expect(rig.standIn.members.effectiveDeletes(a.org_id, a.member_id)).toBe(1);
    expect(rig.standIn.members.effectiveDeletes(b.org_id, b.member_id)).toBe(1);
    expect(rig.audit.get(jobA.jobId)).toMatchObject({ status: 'succeeded', attempts: 3 });
    expect(rig.audit.get(jobA.jobId)?.last_error).toContain('HTTP 429');
  });
});
