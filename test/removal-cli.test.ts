/**
 * The removal commands as an operator runs them: `remove-member --wait`,
 * `removals --failed [--json]`, `removals retry <job_id>|--all`.
 */
import { hostname } from 'node:os';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { enqueueMemberRemoval } from '../jobs/removals/producer.js';
import { createRig, startShared, type Rig, type Shared } from './support/removal-rig.js';
import { requireBuiltCli, runCli } from './support/cli-process.js';

let shared: Shared;
let rig: Rig;
beforeAll(async () => {
  requireBuiltCli('src/commands/remove-member.js', 'src/commands/removals.js');
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

describe('user-mirror remove-member', () => {
  it('prints the job id, and with --wait the outcome', async () => {
    await rig.startWorker();
    const m = rig.member();
    const run = await runCli(
      ['remove-member', m.org_id, m.member_id, '--requested-by', 'ops:carol', '--reason', 'left the company', '--wait'],
      rig.env(),
    );
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const [queued, outcome] = run.stdout.trim().split('\n');
    const jobId = /^job (\S+): queued removal of member/.exec(queued ?? '')?.[1] ?? '';
    expect(jobId).not.toBe('');
    expect(outcome).toBe(`job ${jobId}: succeeded (member removed)`);
    expect(rig.standIn.members.effectiveDeletes(m.org_id, m.member_id)).toBe(1);
    expect(rig.audit.get(jobId)).toMatchObject({ status: 'succeeded', requested_by: 'ops:carol', reason: 'left the company' });

    const again = await runCli(['remove-member', m.org_id, m.member_id, '--wait', '--timeout', '90'], rig.env());
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(/: already_absent \(member was already gone\)\n$/);
    expect(rig.standIn.members.effectiveDeletes(m.org_id, m.member_id)).toBe(1);
  });

  it('without --wait prints the job id and exits; a duplicate says it collapsed', async () => {
    const m = rig.member();
    const first = await runCli(['remove-member', m.org_id, m.member_id], rig.env());
    expect(first.code).toBe(0);
    const jobId = /^job (\S+): queued/.exec(first.stdout)?.[1];
    const second = await runCli(['remove-member', m.org_id.toUpperCase(), m.member_id], rig.env());
    expect(second.code).toBe(0);
    expect(second.stdout).toBe(
      `job ${jobId}: a removal of member ${m.member_id} of org ${m.org_id} is already pending; request collapsed into it\n`,
    );
    expect(await rig.queue.count()).toBe(1);
  });

  it('with --wait reports a permanent failure with the service detail, exit 1', async () => {
    await rig.startWorker();
    const m = rig.member();
    rig.standIn.faults.failNext({ method: 'DELETE', status: 403, body: { detail: 'org is locked' } });
    const run = await runCli(['remove-member', m.org_id, m.member_id, '--wait'], rig.env());
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(/: failed: permanent failure, not retried: DELETE \S+ -> HTTP 403: org is locked\n$/);
  });

  it('with --wait waits through retries: a 503 then success reports succeeded', async () => {
    await rig.startWorker();
    const m = rig.member();
    rig.standIn.faults.failNext({ method: 'DELETE', status: 503, times: 2 });
    const run = await runCli(['remove-member', m.org_id, m.member_id, '--wait'], rig.env({ REMOVAL_BACKOFF_MS: '20' }));
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/: succeeded \(member removed\)\n$/);
    expect(rig.standIn.members.deleteCalls(m.org_id, m.member_id)).toBe(3);
  });

  it('with --wait gives up at --timeout, exit 1, leaving the job queued', async () => {
    const m = rig.member();
    const run = await runCli(['remove-member', m.org_id, m.member_id, '--wait', '--timeout', '0.5'], rig.env());
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(/still pending after 0.5s/);
    expect(await rig.queue.count()).toBe(1);
  });

  it('refuses a malformed id with exit 2 and enqueues nothing', async () => {
    const run = await runCli(['remove-member', '../../etc', '9b2d4e61-1c7f-4a0b-8e3d-5f6a7b8c9d0e'], rig.env());
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/org_id: must be a UUID/);
    expect(await rig.queue.count()).toBe(0);
  });
});

describe('user-mirror removals', () => {
  async function failedJobs(n: number): Promise<string[]> {
    await rig.startWorker();
    const ids: string[] = [];
    for (let i = 0; i < n; i++) {
      rig.standIn.faults.failNext({
        method: 'DELETE',
        status: 422,
        body: { detail: [{ loc: ['path', 'org_id'], msg: `bad org ${i}`, type: 'x' }] },
      });
      const { jobId } = await enqueueMemberRemoval(rig.queue, { ...rig.member(), requested_by: `ops:${i}` });
      await rig.finished(jobId);
      ids.push(jobId);
    }
    return ids;
  }

  it('--failed lists failed removals with reason and requester; --json too', async () => {
    const [a, b] = await failedJobs(2);
    const text = await runCli(['removals', '--failed'], rig.env());
    expect(text.code).toBe(0);
    const lines = text.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^JOB_ID\s+ORG_ID\s+MEMBER_ID\s+ATTEMPTS\s+FAILED_AT\s+HOST\s+RETRYABLE\s+REASON$/);
    expect(lines).toHaveLength(3);
    expect(text.stdout).toContain(a);
    expect(text.stdout).toContain('path.org_id: bad org 1');

    const json = await runCli(['removals', '--failed', '--json'], rig.env());
    const rows = JSON.parse(json.stdout) as Array<Record<string, unknown>>;
    expect(rows.map((r) => r.job_id).sort()).toEqual([a, b].sort());
    expect(rows.find((r) => r.job_id === a)).toMatchObject({ requested_by: 'ops:0', attempts: 1, in_queue: true, retryable: true });
    expect(String(rows.find((r) => r.job_id === a)?.reason)).toContain('HTTP 422');
  });

  it('retry <job_id> re-queues one failed job, which then completes', async () => {
    const [a, b] = await failedJobs(2);
    const run = await runCli(['removals', 'retry', a ?? ''], rig.env());
    expect(run.code).toBe(0);
    expect(run.stdout).toBe(`job ${a}: re-queued\n`);
    const job = await rig.finished(a ?? '');
    expect(await job.getState()).toBe('completed');
    expect(await rig.queue.getJobState(b ?? '')).toBe('failed');
    expect(rig.audit.get(a ?? '')).toMatchObject({ status: 'succeeded', attempts: 2 });
  });

  it('retry --all re-queues every failed job; unknown ids exit 3', async () => {
    const ids = await failedJobs(3);
    const run = await runCli(['removals', 'retry', '--all'], rig.env());
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/3 failed removal\(s\) re-queued\n$/);
    for (const id of ids) expect(await (await rig.finished(id)).getState()).toBe('completed');
    const empty = await runCli(['removals', '--failed'], rig.env());
    expect(empty.stdout).toBe('no failed removals\n');

    const unknown = await runCli(['removals', 'retry', 'no-such-job'], rig.env());
    expect(unknown.code).toBe(3);
    expect(unknown.stderr).toMatch(/no such job/);
  });

  it('with no arguments shows queue and audit counts', async () => {
    await failedJobs(1);
    const run = await runCli(['removals', '--json'], rig.env());
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({
      target: { id: rig.target.id, queue: rig.queue.name },
      queue: { failed: 1 },
      hosts: [{ host: hostname(), outcomes: { failed: 1 } }],
      audit: { host: hostname(), counts: { failed: 1 } },
    });
  });
});
