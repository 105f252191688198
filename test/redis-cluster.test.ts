/**
 * A Redis Cluster (three masters, AOF, created with `redis-cli --cluster
 * create`): most managed production Redis runs this way, and the queues
 * could not use one at all before REDIS_CLUSTER_NODES. Removals run on it
 * exactly once each; the durability probe reads every master (a job lives
 * on whichever master holds its queue's slot); the daemon syncs on its
 * schedule and runs removals through it; a prefix without a hash tag is a
 * configuration error that says why.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../src/runtime/log.js';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { createRedisConnection, readQueueSettings, type RedisClient } from '../jobs/redis-connection.js';
import { enqueueMemberRemovals } from '../jobs/removals/producer.js';
import { createRemovalQueue } from '../jobs/removals/queue-handle.js';
import { standInManagementClient } from './support/removal-rig.js';
import { startRemovalWorker } from '../jobs/removals/worker.js';
import { readEstateDurability } from '../jobs/redis-durability.js';
import { startTestCluster, type TestCluster } from './support/redis-cluster.js';
import { freePort } from './support/redis-server.js';
import { daemonEnv, getStatus, spawnDaemon } from './support/daemon-process.js';
import { requireBuiltCli, runCli } from './support/cli-process.js';
import { eventually } from './support/eventually.js';
import { urlTarget } from '../jobs/url-target.js';

let cluster: TestCluster;
let standIn: StandIn;
let dir: string;
const clients: RedisClient[] = [];

beforeAll(async () => {
  requireBuiltCli('src/commands/worker.js');
  cluster = await startTestCluster();
  standIn = await startStandIn({ port: 0, users: 1_200, orgs: 0, membersPerOrg: 0, seed: 33 });
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-cluster-'));
});

afterAll(async () => {
  for (const c of clients) c.disconnect();
  await standIn?.close();
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function connect(prefix: string, role: 'worker' | 'producer'): RedisClient {
  const { endpoint } = readQueueSettings({ REDIS_CLUSTER_NODES: cluster.nodesEnv, QUEUE_PREFIX: prefix });
  const client = createRedisConnection(endpoint, { role });
  clients.push(client);
  return client;
}

function members(n: number): Array<{ org_id: string; member_id: string }> {
  return Array.from({ length: n }, () => {
    const m = { org_id: randomUUID(), member_id: randomUUID() };
    standIn.members.add(m.org_id, m.member_id);
    return m;
  });
}

describe('removals on a Redis Cluster', () => {
  it('performs each queued removal exactly once', async () => {
    const prefix = `{um${randomUUID().slice(0, 6)}}`;
    const target = urlTarget(standIn.managementUrl);
    const queue = createRemovalQueue(connect(prefix, 'producer'), { target, prefix });
    const client = standInManagementClient(standIn);
    const worker = startRemovalWorker({
      connection: connect(prefix, 'worker'),
      target,
      prefix,
      client,
      logger: silentLogger,
      concurrency: 8,
      backoffMs: 20,
    });
    try {
      await worker.waitUntilReady();
      const wanted = members(60);
      const added = await enqueueMemberRemovals(queue, wanted);
      await eventually(async () => (await queue.getJobCounts('completed')).completed === 60, 30_000, '60 completed removals');
      for (const a of added) expect((await queue.getJob(a.jobId))?.returnvalue).toMatchObject({ status: 'succeeded', target: target.id });
      for (const m of wanted) expect(standIn.members.effectiveDeletes(m.org_id, m.member_id)).toBe(1);
      expect(await queue.getJobCounts('failed', 'waiting', 'active')).toEqual({ failed: 0, waiting: 0, active: 0 });
    } finally {
      await worker.close(5_000);
      await queue.close();
      await client.close();
    }
  });

  it('judges durability on every master, naming the one that is not', async () => {
    const probe = connect('{probe}', 'producer');
    expect(await readEstateDurability(probe)).toMatchObject({
      durable: true,
      reasons: [],
      settings: { appendonly: 'yes', maxmemoryPolicy: 'noeviction' },
    });

    const weak = cluster.nodes[1];
    if (weak === undefined) throw new Error('cluster has no second node');
    const direct = new Redis({ host: weak.host, port: weak.port, lazyConnect: true });
    await direct.connect();
    try {
      await direct.config('SET', 'appendonly', 'no');
      const verdict = await readEstateDurability(probe);
      expect(verdict.durable).toBe(false);
      expect(verdict.reasons).toEqual([expect.stringContaining(`:${weak.port}: AOF persistence is off`)]);
      expect(verdict.settings.appendonly).toBe('mixed');
    } finally {
      await direct.config('SET', 'appendonly', 'yes');
      direct.disconnect();
    }
  });

  it('refuses a prefix without a hash tag, saying why', async () => {
    const run = await runCli(['worker', 'removals'], {
      PATH: process.env.PATH,
      REDIS_CLUSTER_NODES: cluster.nodesEnv,
      QUEUE_PREFIX: 'user-mirror',
      MANAGEMENT_URL: standIn.managementUrl,
      MANAGEMENT_KEY: standIn.managementKey,
      MIRROR_DB: join(dir, 'refused.db'),
    });
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/QUEUE_PREFIX: on a Redis Cluster must contain a hash tag, e\.g\. \{user-mirror\}/);
  });
});

describe('the daemon on a Redis Cluster', () => {
  it('syncs on its schedule and runs removals', async () => {
    const prefix = '{um-daemon}';
    const port = await freePort();
    const env = daemonEnv({ redisUrl: '', standIn, mirrorDb: join(dir, 'daemon.db'), queuePrefix: prefix, statusPort: port });
    const daemon = spawnDaemon({ ...env, REDIS_URL: '', REDIS_CLUSTER_NODES: cluster.nodesEnv });
    try {
      await daemon.ready;
      expect(daemon.logs.some((l) => l.event === 'removals.redis_durability' && l.state === 'run')).toBe(true);
      // Two scheduled syncs, so the schedule (not only the start-up catch-up) works on the cluster.
      await eventually(
        () => daemon.logs.filter((l) => l.event === 'sync.finished' && l.status === 'succeeded').length >= 2,
        60_000,
        'two succeeded syncs',
      );
      const ready = await getStatus(port, '/readyz');
      expect(ready.status).toBe(200);

      const queue = createRemovalQueue(connect(prefix, 'producer'), { target: standIn.managementUrl, prefix });
      const [m] = members(1);
      if (m === undefined) throw new Error('no member');
      const [added] = await enqueueMemberRemovals(queue, [m]);
      await eventually(async () => (await queue.getJobState(added?.jobId ?? '')) === 'completed', 20_000, 'the removal');
      expect(standIn.members.effectiveDeletes(m.org_id, m.member_id)).toBe(1);
      await queue.close();

      // The CLI on the cluster: enqueue and wait for the outcome (QueueEvents), then the estate's counts.
      const [n] = members(1);
      if (n === undefined) throw new Error('no member');
      const cliEnv = { ...env, REDIS_URL: '', REDIS_CLUSTER_NODES: cluster.nodesEnv };
      const removed = await runCli(['remove-member', n.org_id, n.member_id, '--wait', '--timeout', '90'], cliEnv);
      expect(removed.stdout).toMatch(/succeeded \(member removed\)/);
      expect(removed.code).toBe(0);
      const counts = await runCli(['removals', '--json'], cliEnv);
      expect(counts.code).toBe(0);
      expect(JSON.parse(counts.stdout)).toMatchObject({ queue: { completed: 2, failed: 0 }, unbound: { waiting: 0 } });
    } finally {
      await daemon.stop('SIGTERM');
    }
  });
});
