/**
 * A full disk under the removal audit, between the DELETE and its record:
 * the removal is recorded as performed once there is room again, never
 * performed twice, never recorded `already_absent` for its own removal, and
 * no attempt is burnt meanwhile. The disk is a 2 MB tmpfs the test mounts
 * (root), filled with a file until ENOSPC.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, rmdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openAudit } from '../db/open-audit.js';
import { createRemovalAudit } from '../db/removal-audit.js';
import { enqueueMemberRemoval } from '../jobs/removals/producer.js';
import { deleteRequests, useRemovalRig, type Rig } from './support/removal-rig.js';
import { eventually } from './support/eventually.js';
import { fill } from './support/full-disk.js';

let rig: Rig;
useRemovalRig((_shared, r) => {
  rig = r;
});

let mount: string;
beforeAll(() => {
  mount = mkdtempSync(join(tmpdir(), 'user-mirror-full-'));
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m,mode=0700', 'tmpfs', mount]);
});
afterAll(() => {
  execFileSync('umount', [mount]);
  rmdirSync(mount);
});

describe('the audit on a full disk', () => {
  it('records a removal performed before the disk filled as succeeded once there is room, with one DELETE', async () => {
    const db = openAudit(join(mount, 'audit.db'));
    const audit = createRemovalAudit(db);
    try {
      await rig.startWorker({ audit, auditBusyBudgetMs: 500 });
      rig.standIn.faults.set({ latencyMs: 700 });
      const m = rig.member();
      const { jobId } = await enqueueMemberRemoval(rig.queue, m);
      await eventually(() => audit.get(jobId)?.status === 'requested', 10_000, 'the started row', 20);
      // The DELETE is in flight; the disk fills before its answer is recorded.
      const filler = join(mount, 'filler');
      expect(fill(filler)).toBeGreaterThan(0);

      await eventually(() => rig.standIn.members.has(m.org_id, m.member_id) === false, 10_000, 'the member deleted', 20);
      await eventually(async () => (await rig.queue.getJob(jobId))?.progress !== 0, 10_000, 'the outcome kept with the job', 20);
      await sleep(1_000);
      const held = await rig.queue.getJob(jobId);
      expect(held).toMatchObject({ progress: { performed: 'succeeded' }, attemptsMade: 0 });
      expect(held?.finishedOn).toBeUndefined();
      expect(audit.get(jobId)?.status).toBe('requested');

      rmSync(filler);
      const job = await rig.finished(jobId, 30_000);
      expect(job.returnvalue).toMatchObject({ status: 'succeeded', org_id: m.org_id, member_id: m.member_id });
      expect(audit.get(jobId)).toMatchObject({ status: 'succeeded' });
      expect(deleteRequests(rig.standIn, m.member_id)).toBe(1);
    } finally {
      rig.standIn.faults.set({ latencyMs: 0 });
      db.close();
    }
  });
});
