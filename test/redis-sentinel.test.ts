/**
 * Redis under Sentinel (a master, a replica, three sentinels): the other
 * common shape of managed production Redis. The removal worker and the
 * producer connect through REDIS_SENTINELS / REDIS_SENTINEL_NAME; the master
 * is SIGKILLed in the middle of a burst of removals; after the failover
 * every removal completes exactly once (each member deleted once upstream,
 * each job completed, none failed).
 *
 * Replication is asynchronous: a job's completion written on the old master
 * just before it died may be missing on the new one. Such a job is active
 * again with a lock nobody renews; it is recovered as stalled and its re-run
 * ends as `already_absent` (a 404): the member is still deleted only once.
 * The locks here are short so that recovery happens within the test.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../src/runtime/log.js';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { openAudit } from '../db/open-audit.js';
import { createRemovalAudit } from '../db/removal-audit.js';
import { createRedisConnection, readQueueSettings, type RedisClient } from '../jobs/redis-connection.js';
import { enqueueMemberRemovals } from '../jobs/removals/producer.js';
import { createRemovalQueue } from '../jobs/removals/queue-handle.js';
import { standInManagementClient } from './support/removal-rig.js';
import { startRemovalWorker } from '../jobs/removals/worker.js';
import { startTestSentinel, type TestSentinel } from './support/redis-sentinel.js';
import { eventually } from './support/eventually.js';
import { urlTarget } from '../jobs/url-target.js';

let sentinel: TestSentinel;
let standIn: StandIn;
let dir: string;
const clients: RedisClient[] = [];

beforeAll(async () => {
  sentinel = await startTestSentinel();
  standIn = await startStandIn({ port: 0, users: 0, orgs: 0, membersPerOrg: 0, seed: 44 });
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-sentinel-'));
});

afterAll(async () => {
  for (const c of clients) c.disconnect();
  await standIn?.close();
  await sentinel?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function connect(role: 'worker' | 'producer'): RedisClient {
  const { endpoint } = readQueueSettings({ REDIS_SENTINELS: sentinel.sentinelsEnv, REDIS_SENTINEL_NAME: sentinel.masterName });
  const client = createRedisConnection(endpoint, { role });
  clients.push(client);
  return client;
}

describe('removals under Sentinel', () => {
  it('completes every removal exactly once across a failover in the middle of a burst', async () => {
    const N = 200;
    const prefix = `s${randomUUID().slice(0, 6)}`;
    const target = urlTarget(standIn.managementUrl);
    const producer = connect('producer');
    const queue = createRemovalQueue(producer, { target, prefix });
    const members = Array.from({ length: N }, () => {
      const m = { org_id: randomUUID(), member_id: randomUUID() };
      standIn.members.add(m.org_id, m.member_id);
      return m;
    });
    const added = await enqueueMemberRemovals(queue, members);
    // The burst is acknowledged by the replica too before the master dies: the test is about processing across a failover.
    expect(await (producer as Redis).wait(1, 5_000)).toBe(1);

    const db = openAudit(join(dir, 'audit.db'));
    const client = standInManagementClient(standIn);
    // Slow answers spread the burst over seconds, so the kill lands in its middle.
    standIn.faults.set({ latencyMs: 60 });
    const worker = startRemovalWorker({
      connection: connect('worker'),
      target,
      prefix,
      client,
      audit: createRemovalAudit(db),
      logger: silentLogger,
      concurrency: 8,
      backoffMs: 50,
      lockDurationMs: 2_000,
      stalledIntervalMs: 1_000,
    });
    try {
      await worker.waitUntilReady();
      await eventually(() => standIn.members.totalDeleteCalls() >= N / 4, 30_000, 'a quarter of the burst');
      const failover = await sentinel.killMasterAndWaitForFailover();
      expect(failover.to).not.toBe(failover.from);
      const doneAtKill = standIn.members.totalDeleteCalls();
      expect(doneAtKill).toBeLessThan(N);

      await eventually(
        async () => {
          const c = await queue.getJobCounts('completed', 'failed', 'waiting', 'active', 'delayed');
          return c.completed === N ? c : undefined;
        },
        60_000,
        `all ${N} removals completed after the failover`,
      );
      expect(await queue.getJobCounts('failed', 'waiting', 'active', 'delayed')).toEqual({ failed: 0, waiting: 0, active: 0, delayed: 0 });
      for (const m of members) expect(standIn.members.effectiveDeletes(m.org_id, m.member_id)).toBe(1);
      for (const a of added) {
        expect((await queue.getJob(a.jobId))?.returnvalue).toMatchObject({ status: expect.stringMatching(/^(succeeded|already_absent)$/) });
      }
      // The audit agrees: one row per job, each finished as done.
      const rows = createRemovalAudit(db).list({ limit: 10 * N });
      expect(rows).toHaveLength(N);
      expect(rows.filter((r) => r.status !== 'succeeded' && r.status !== 'already_absent')).toEqual([]);
    } finally {
      standIn.faults.clear();
      await worker.close(5_000);
      await queue.close();
      await client.close();
      db.close();
    }
  });
});
