/**
 * The audit is never wrong, however long someone else holds a write lock.
 *
 * A sync's publish holds the mirror's write lock for tens of seconds. The
 * audit lives in a file of its own (AUDIT_DB), so a removal during a publish
 * records its outcome as usual; and when the audit file itself is busy for
 * longer than its busy timeout, the writer waits it out (asynchronously) and
 * the row still ends right. Real Redis, the stand-in, real SQLite files; the
 * locks are taken by other connections with BEGIN IMMEDIATE, as a publish does.
 */
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { openMirror } from '../db/open.js';
import { AUDIT_BUSY_TIMEOUT_MS } from '../db/open-audit.js';
import { enqueueMemberRemoval } from '../jobs/removals/producer.js';
import { deleteRequests, useRemovalRig, type Rig } from './support/removal-rig.js';
import { eventually } from './support/eventually.js';

/** Longer than both busy timeouts (the mirror's 5 s, the audit's 250 ms). */
const HOLD_MS = 6_000;

let rig: Rig;
useRemovalRig((_shared, r) => {
  rig = r;
});

/** A connection holding `path`'s write lock, as a publish in progress does. */
function holdWriteLock(path: string): { release(): void } {
  const holder = new Database(path);
  holder.exec('BEGIN IMMEDIATE');
  return {
    release() {
      holder.exec('ROLLBACK');
      holder.close();
    },
  };
}

function isLocked(path: string): boolean {
  const probe = new Database(path, { timeout: 0 });
  try {
    probe.exec('BEGIN IMMEDIATE; ROLLBACK');
    return false;
  } catch (err) {
    return (err as { code?: string }).code === 'SQLITE_BUSY';
  } finally {
    probe.close();
  }
}

describe('audit writes during a long lock', () => {
  it('a removal completed while a publish holds the mirror ends `succeeded` in the audit', async () => {
    openMirror(rig.dbPath).close();
    const publish = holdWriteLock(rig.dbPath);
    const heldSince = Date.now();
    try {
      await rig.startWorker();
      const m = rig.member();
      const { jobId } = await enqueueMemberRemoval(rig.queue, m);
      const job = await rig.finished(jobId);
      expect(job.returnvalue).toEqual({
        status: 'succeeded',
        org_id: m.org_id,
        member_id: m.member_id,
        target: rig.target.id,
        host: hostname(),
      });
      // Keep the lock past the mirror's busy timeout: the old failure came after 5 s of waiting.
      await sleep(Math.max(0, HOLD_MS - (Date.now() - heldSince)));
      expect(isLocked(rig.dbPath)).toBe(true);
      expect(rig.audit.get(jobId)).toMatchObject({ status: 'succeeded', attempts: 1, last_error: null });
      expect(rig.standIn.members.has(m.org_id, m.member_id)).toBe(false);
    } finally {
      publish.release();
    }
  });

  it('an audit file busy for longer than its busy timeout delays the writes; the row still ends right', async () => {
    await rig.startWorker();
    // Slow DELETEs: the lock is taken after `started` landed and released long after the answer came.
    rig.standIn.faults.set({ latencyMs: 500 });
    const m = rig.member();
    const { jobId } = await enqueueMemberRemoval(rig.queue, m);
    await eventually(() => rig.audit.get(jobId)?.status === 'requested', 10_000, 'the started row', 20);

    const lock = holdWriteLock(rig.auditPath);
    expect(isLocked(rig.auditPath)).toBe(true);
    // The DELETE answers while the lock is held: the `finished` write meets the lock, again and again.
    await eventually(() => rig.standIn.members.has(m.org_id, m.member_id) === false, 10_000, 'the member to be deleted', 20);
    await sleep(10 * AUDIT_BUSY_TIMEOUT_MS);
    expect(rig.audit.get(jobId)).toMatchObject({ status: 'requested' });
    const releasedAt = Date.now();
    lock.release();

    const job = await rig.finished(jobId);
    expect(job.returnvalue).toEqual({
      status: 'succeeded',
      org_id: m.org_id,
      member_id: m.member_id,
      target: rig.target.id,
      host: hostname(),
    });
    const row = rig.audit.get(jobId);
    expect(row).toMatchObject({ status: 'succeeded', attempts: 1 });
    // Written after the lock went, stamped with when the removal finished.
    expect(Date.parse(row?.finished_at ?? '')).toBeLessThanOrEqual(releasedAt);
    expect(job.finishedOn ?? 0).toBeGreaterThanOrEqual(releasedAt);
  });

  it('a write that cannot land within its budget pauses the queue; the removal is recorded as performed, never done twice', async () => {
    await rig.startWorker({ auditBusyBudgetMs: 1_000 });
    rig.standIn.faults.set({ latencyMs: 500 });
    const m = rig.member();
    const { jobId } = await enqueueMemberRemoval(rig.queue, m);
    await eventually(() => rig.audit.get(jobId)?.status === 'requested', 10_000, 'the started row', 20);

    const lock = holdWriteLock(rig.auditPath);
    await eventually(() => rig.standIn.members.has(m.org_id, m.member_id) === false, 10_000, 'the member to be deleted', 20);
    // Past the budget: the job keeps its outcome and goes back to wait, no attempt burnt, the row still `requested`.
    await eventually(async () => (await rig.queue.getJob(jobId))?.progress !== 0, 10_000, 'the outcome kept with the job', 20);
    await sleep(1_500);
    const held = await rig.queue.getJob(jobId);
    expect(held?.progress).toEqual({ performed: 'succeeded' });
    expect(held?.attemptsMade).toBe(0);
    expect(held?.finishedOn).toBeUndefined();
    expect(rig.audit.get(jobId)?.status).toBe('requested');
    lock.release();

    const job = await rig.finished(jobId);
    expect(job.returnvalue).toEqual({
      status: 'succeeded',
      org_id: m.org_id,
      member_id: m.member_id,
      target: rig.target.id,
      host: hostname(),
    });
    expect(rig.audit.get(jobId)).toMatchObject({ status: 'succeeded' });
    // One DELETE: the later run only wrote the audit.
    expect(deleteRequests(rig.standIn, m.member_id)).toBe(1);
  });
});
