/**
 * The removal worker outlives a Redis restart: it reconnects on its own and
 * keeps processing. Needs a Redis the test started (it restarts it).
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { enqueueMemberRemoval } from '../jobs/removals/producer.js';
import { createRig, startShared, type Rig, type Shared } from './support/removal-rig.js';
import { eventually } from './support/eventually.js';

let shared: Shared;
let rig: Rig;
beforeAll(async () => {
  shared = await startShared();
});
afterAll(async () => {
  await shared?.close();
});
beforeEach(async () => {
  rig = await createRig(shared);
});
afterEach(async () => {
  await rig?.close();
});

describe('Redis restart', () => {
  it('the worker reconnects and processes jobs enqueued after the restart', async () => {
    const worker = await rig.startWorker();
    const before = rig.member();
    const first = await enqueueMemberRemoval(rig.queue, before);
    await rig.finished(first.jobId);

    await shared.redis.restart({ keepData: true, downMs: 1_000 });

    const after = rig.member();
    // Slow answers keep the job pending while a duplicate arrives.
    rig.standIn.faults.set({ latencyMs: 300 });
    // The producer connection may still be reconnecting: the caller retries, as a real producer would.
    const { jobId } = await eventually(() => enqueueMemberRemoval(rig.queue, after), 15_000, 'an enqueue to succeed after the restart', 20);
    const duplicate = await enqueueMemberRemoval(rig.queue, after);
    expect(duplicate).toMatchObject({ jobId, deduplicated: true });
    const job = await rig.finished(jobId, 30_000);
    // Collapsed requests are still audited after the restart (the event reader reconnected).
    await eventually(() => rig.audit.get(jobId)?.requests === 2, 10_000, 'the duplicate in the audit', 20);
    expect(await job.getState()).toBe('completed');
    expect(rig.standIn.members.effectiveDeletes(after.org_id, after.member_id)).toBe(1);
    // The dataset survived the clean restart.
    expect(await rig.queue.getJobState(first.jobId)).toBe('completed');
    expect(worker.worker.isRunning()).toBe(true);
  });
});
