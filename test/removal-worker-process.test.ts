/**
 * `user-mirror worker removals` as a real process: killed with SIGKILL in
 * the middle of a removal and restarted, the job is recovered (stalled-job
 * recovery) and the member is deleted exactly once; on SIGTERM it finishes
 * the removal in flight and exits 0.
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { enqueueMemberRemoval } from '../jobs/removals/producer.js';
import { createRig, startShared, type Rig, type Shared } from './support/removal-rig.js';
import { requireBuiltCli, startCli, type CliProcess } from './support/cli-process.js';
import { eventually } from './support/eventually.js';

let shared: Shared;
let rig: Rig;
const children: CliProcess[] = [];

beforeAll(async () => {
  requireBuiltCli('src/commands/worker.js', 'jobs/removals/worker.js');
  shared = await startShared();
});
afterAll(async () => {
  await shared?.close();
});
beforeEach(async () => {
  rig = await createRig(shared);
});
afterEach(async () => {
  for (const c of children.splice(0)) if (c.child.exitCode === null) c.child.kill('SIGKILL');
  await rig?.close();
});

function startWorkerProcess(extra: Record<string, string> = {}): CliProcess {
  const p = startCli(['worker', 'removals'], rig.env({ REMOVAL_LOCK_MS: '1000', REMOVAL_BACKOFF_MS: '50', ...extra }));
  children.push(p);
  return p;
}

describe('worker process', () => {
  it('recovers a removal interrupted by kill -9 and deletes the member exactly once', async () => {
    const m = rig.member();
    // The stand-in holds each DELETE for 1.5 s before acting on it: time to kill the worker mid-request.
    rig.standIn.faults.set({ latencyMs: 1_500 });
    const first = startWorkerProcess();
    await first.line(/removal worker started/);
    const { jobId } = await enqueueMemberRemoval(rig.queue, m);

    await eventually(() => rig.standIn.members.deleteCalls(m.org_id, m.member_id) === 1, 10_000, 'the DELETE to reach the stand-in', 20);
    expect(await rig.queue.getJobState(jobId)).toBe('active');
    first.child.kill('SIGKILL');
    expect(await first.exited()).toBeNull();
    expect(rig.audit.get(jobId)).toMatchObject({ status: 'requested', attempts: 1 });

    rig.standIn.faults.set({ latencyMs: 0 });
    const second = startWorkerProcess();
    const job = await rig.finished(jobId, 30_000);

    expect(await job.getState()).toBe('completed');
    // The killed worker's request was already being handled by the service;
    // the re-run's 404 counts as done.
    expect(rig.standIn.members.has(m.org_id, m.member_id)).toBe(false);
    expect(rig.standIn.members.effectiveDeletes(m.org_id, m.member_id)).toBe(1);
    expect(rig.standIn.members.deleteCalls(m.org_id, m.member_id)).toBe(2);
    expect(job.stalledCounter).toBe(1);
    expect(rig.audit.get(jobId)).toMatchObject({ attempts: 2 });
    expect(['succeeded', 'already_absent']).toContain(rig.audit.get(jobId)?.status);
    await second.line(/"stalled"|stalled/);

    second.child.kill('SIGTERM');
    expect(await second.exited()).toBe(0);
  });

  it('on SIGTERM finishes the removal in flight, then exits 0', async () => {
    const m = rig.member();
    rig.standIn.faults.set({ latencyMs: 1_000 });
    const worker = startWorkerProcess();
    await worker.line(/removal worker started/);
    const { jobId } = await enqueueMemberRemoval(rig.queue, m);
    await eventually(() => rig.standIn.members.deleteCalls(m.org_id, m.member_id) === 1, 10_000, 'the DELETE to reach the stand-in', 20);

    worker.child.kill('SIGTERM');
    expect(await worker.exited(15_000)).toBe(0);
    expect(await rig.queue.getJobState(jobId)).toBe('completed');
    expect(rig.standIn.members.effectiveDeletes(m.org_id, m.member_id)).toBe(1);
    expect(rig.audit.get(jobId)).toMatchObject({ status: 'succeeded', attempts: 1 });
    expect(worker.stdout()).toMatch(/"drained":true/);
  });

  it('stops waiting at SHUTDOWN_TIMEOUT_MS, exits 0, and the next worker finishes the job', async () => {
    const m = rig.member();
    rig.standIn.faults.set({ latencyMs: 3_000 });
    const worker = startWorkerProcess({ SHUTDOWN_TIMEOUT_MS: '300' });
    await worker.line(/removal worker started/);
    const { jobId } = await enqueueMemberRemoval(rig.queue, m);
    await eventually(() => rig.standIn.members.deleteCalls(m.org_id, m.member_id) === 1, 10_000, 'the DELETE to reach the stand-in', 20);

    const stoppedAt = Date.now();
    worker.child.kill('SIGTERM');
    expect(await worker.exited(15_000)).toBe(0);
    expect(Date.now() - stoppedAt).toBeLessThan(2_500);
    expect(worker.stdout()).toMatch(/"drained":false/);

    rig.standIn.faults.set({ latencyMs: 0 });
    startWorkerProcess();
    const job = await rig.finished(jobId, 30_000);
    expect(await job.getState()).toBe('completed');
    expect(rig.standIn.members.effectiveDeletes(m.org_id, m.member_id)).toBe(1);
  });
});
