/**
 * Production and sandbox on one Redis, the way they ran during the incident:
 * a sandbox worker and a production worker shared a Redis and the default
 * QUEUE_PREFIX, so both fetched from one `member-removals` queue. The
 * sandbox worker took 48 production removals, sent their DELETEs to the
 * sandbox service, got 404s and recorded them as `already_absent`: the
 * members kept their access and the audit said they were gone.
 *
 * The fix binds each removal to its management target twice (the queue's
 * name and the payload's `target`), and leaves jobs of the old queue, which
 * name no target, to the operator (`removals adopt`). These tests re-run the
 * incident with two real stand-ins (different URLs and keys), one real Redis,
 * one prefix for both environments, and real workers with their own audits.
 */
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Queue } from 'bullmq';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { openAudit } from '../db/open-audit.js';
import { createRemovalAudit, type RemovalAudit } from '../db/removal-audit.js';
import { silentLogger } from '../src/runtime/log.js';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { createRedisConnection, type RedisClient } from '../jobs/redis-connection.js';
import { enqueueMemberRemovals } from '../jobs/removals/producer.js';
import { createRemovalQueue } from '../jobs/removals/queue-handle.js';
import { REMOVE_MEMBER_JOB, UNBOUND_REMOVAL_QUEUE, removalQueueName, type ManagementTarget } from '../jobs/removals/contract.js';
import { startRemovalWorker, type RemovalWorkerHandle } from '../jobs/removals/worker.js';
import { countUnbound } from '../jobs/removals/unbound.js';
import { deleteRequests, standInManagementClient } from './support/removal-rig.js';
import { startTestRedis, type TestRedis } from './support/redis-server.js';
import { requireBuiltCli, runCli } from './support/cli-process.js';
import { eventually } from './support/eventually.js';
import { urlTarget } from '../jobs/url-target.js';
import { auditPathFor } from '../db/audit-location.js';

/** One management service and the host that removes members from it. */
interface Environment {
  name: string;
  standIn: StandIn;
  target: ManagementTarget;
  mirrorPath: string;
  audit: RemovalAudit;
  startWorker(): Promise<RemovalWorkerHandle>;
  /** Env for `node dist/cli.js ...` on this environment's host. */
  env(extra?: Record<string, string>): NodeJS.ProcessEnv;
}

let redis: TestRedis;
/** One prefix for both environments: the shared default `user-mirror` of the incident. */
let prefix: string;
let dir: string;
/** The producers' connection (typed and raw). */
let producer: RedisClient;
let production: Environment;
let sandbox: Environment;
/** Run in reverse order after each test: workers before audits, audits before stand-ins. */
let cleanups: Array<() => unknown> = [];

beforeAll(async () => {
  requireBuiltCli('src/commands/removals.js', 'src/commands/status.js', 'src/commands/sync.js');
  redis = await startTestRedis();
});
afterAll(async () => {
  await redis?.stop();
});
beforeEach(async () => {
  prefix = `t${randomUUID().slice(0, 8)}`;
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-environments-'));
  producer = createRedisConnection(redis.url, { role: 'producer' });
  cleanups.push(() => producer.disconnect());
  production = await openEnvironment('production', 1);
  sandbox = await openEnvironment('sandbox', 2);
  expect(production.target.id).not.toBe(sandbox.target.id);
});
afterEach(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
  cleanups = [];
  rmSync(dir, { recursive: true, force: true });
});

async function openEnvironment(name: string, seed: number): Promise<Environment> {
  // A few users, so `sync --once` can give this host a fresh mirror (test 3's `status`).
  const standIn = await startStandIn({ users: 5, orgs: 0, membersPerOrg: 0, seed });
  cleanups.push(() => standIn.close());
  const target = urlTarget(standIn.managementUrl);
  mkdirSync(join(dir, name));
  const mirrorPath = join(dir, name, 'mirror.db');
  const db = openAudit(auditPathFor(mirrorPath));
  cleanups.push(() => db.close());
  const audit = createRemovalAudit(db);
  return {
    name,
    standIn,
    target,
    mirrorPath,
    audit,
    async startWorker() {
      const connection = createRedisConnection(redis.url, { role: 'worker' });
      const client = standInManagementClient(standIn);
      const handle = startRemovalWorker({
        connection,
        target,
        prefix,
        client,
        audit,
        logger: silentLogger,
        concurrency: 8,
        backoffMs: 20,
        name,
      });
      cleanups.push(async () => {
        await handle.close(5_000);
        await client.close();
        connection.disconnect();
      });
      await handle.waitUntilReady();
      return handle;
    },
    env(extra = {}) {
      return {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        REDIS_URL: redis.url,
        QUEUE_PREFIX: prefix,
        MANAGEMENT_URL: standIn.managementUrl,
        MANAGEMENT_KEY: standIn.managementKey,
        SERVICE_BASE_URL: standIn.baseUrl,
        SERVICE_API_KEY: standIn.apiKey,
        SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
        MIRROR_DB: mirrorPath,
        AUDIT_DB: auditPathFor(mirrorPath),
        MIRROR_ID: `${name}-mirror`,
        LOG_LEVEL: 'warn',
        ...extra,
      };
    },
  };
}

/** A member of an org in production (the sandbox has no such member: its DELETE would answer 404). */
function productionMember(): { org_id: string; member_id: string } {
  const m = { org_id: randomUUID(), member_id: randomUUID() };
  production.standIn.members.add(m.org_id, m.member_id);
  return m;
}

/** A producer in another language: plain BullMQ, no validation, no target added for it. */
function rawQueue(name: string): Queue {
  const queue = new Queue(name, { connection: producer, prefix });
  cleanups.push(() => queue.close());
  return queue;
}

describe('production and sandbox workers on one Redis and one prefix', () => {
  it('the incident, re-run: the sandbox worker takes none of 100 production removals; production performs each once', async () => {
    // Both workers run before anything is enqueued: the sandbox worker has every chance to steal.
    const productionWorker = await production.startWorker();
    const sandboxWorker = await sandbox.startWorker();
    const members = Array.from({ length: 100 }, () => productionMember());

    const queue = createRemovalQueue(producer, { target: production.standIn.managementUrl, prefix });
    cleanups.push(() => queue.close());
    const enqueued = await enqueueMemberRemovals(
      queue,
      members.map((m) => ({ ...m, requested_by: 'ops:incident-replay' })),
    );
    expect(enqueued.filter((e) => e.deduplicated)).toHaveLength(0);

    await eventually(async () => (await queue.getJobCounts('completed', 'failed')).completed === 100, 30_000, '100 completed removals', 20);
    expect(await queue.getJobCounts('failed')).toEqual({ failed: 0 });
    for (const { jobId, payload } of enqueued) {
      const job = await queue.getJob(jobId);
      // `already_absent` here is exactly what the incident recorded.
      expect(job?.returnvalue).toMatchObject({ status: 'succeeded', target: production.target.id, member_id: payload.member_id });
    }
    for (const m of members) {
      expect(production.standIn.members.effectiveDeletes(m.org_id, m.member_id)).toBe(1);
      expect(production.standIn.members.has(m.org_id, m.member_id)).toBe(false);
    }
    expect(production.standIn.members.totalDeleteCalls()).toBe(100);
    expect(production.audit.list({ status: 'succeeded' })).toHaveLength(100);
    expect(production.audit.list()).toHaveLength(100);
    // Every row says which management service it is about.
    expect(new Set(production.audit.list().map((r) => r.target))).toEqual(new Set([production.target.id]));
    expect(productionWorker.counters()).toMatchObject({ succeeded: 100, already_absent: 0, failed: 0 });

    // The sandbox saw nothing: no request, no audit row, no outcome.
    expect(sandbox.standIn.members.totalDeleteCalls()).toBe(0);
    expect(deleteRequests(sandbox.standIn)).toBe(0);
    expect(sandbox.audit.list()).toHaveLength(0);
    expect(sandboxWorker.counters()).toEqual({ succeeded: 0, already_absent: 0, failed: 0, retrying: 0, rate_limited: 0 });
  });

  // A producer that names one target and writes to another's queue (a bug, or a hand-made job).
  // The second case is the incident's job: a production removal in front of the sandbox worker.
  it.each([
    { queueOf: 'production', named: 'sandbox' },
    { queueOf: 'sandbox', named: 'production' },
  ] as const)('a job in $queueOf’s queue naming $named’s target is failed once and never performed', async ({ queueOf, named }) => {
    const envs = { production, sandbox };
    const holder = envs[queueOf];
    const other = envs[named];
    await production.startWorker();
    await sandbox.startWorker();
    const m = productionMember();

    const foreign = rawQueue(removalQueueName(holder.target.id));
    const added = await foreign.add(
      REMOVE_MEMBER_JOB,
      { target: other.target.id, ...m },
      { attempts: 5, backoff: { type: 'removal', delay: 20 } },
    );
    const jobId = added.id ?? '';
    await eventually(async () => (await foreign.getJobState(jobId)) === 'failed', 10_000, 'the job to fail', 20);

    const job = await foreign.getJob(jobId);
    // Unrecoverable: five attempts allowed, one used.
    expect(job?.attemptsMade).toBe(1);
    const reason = job?.failedReason ?? '';
    expect(reason).toMatch(/wrong management target/);
    expect(reason).toContain(holder.target.id);
    expect(reason).toContain(other.target.id);
    for (const env of [production, sandbox]) expect(reason).not.toContain(env.standIn.managementKey);

    // No DELETE anywhere: the member keeps their place until a correct request comes.
    expect(production.standIn.members.totalDeleteCalls()).toBe(0);
    expect(sandbox.standIn.members.totalDeleteCalls()).toBe(0);
    expect(deleteRequests(production.standIn) + deleteRequests(sandbox.standIn)).toBe(0);
    expect(production.standIn.members.has(m.org_id, m.member_id)).toBe(true);

    // The holder's audit says so; the other host's audit never heard of it.
    const row = holder.audit.get(jobId);
    expect(row).toMatchObject({ status: 'failed', attempts: 1, org_id: m.org_id, member_id: m.member_id });
    expect(row?.last_error).toMatch(/wrong management target/);
    for (const env of [production, sandbox]) expect(row?.last_error).not.toContain(env.standIn.managementKey);
    expect(other.audit.list()).toHaveLength(0);
  });
});

describe('removals queued by an older producer (queue member-removals, no target)', () => {
  it('wait untouched and are reported until adopted; once adopted, production performs them exactly once', async () => {
    const m = productionMember();
    // A fresh mirror, so `status` exits 1 for the unbound removal alone (and 0 once it is adopted).
    const sync = await runCli(['sync', '--once'], production.env());
    expect(sync.code, sync.stderr).toBe(0);

    const old = rawQueue(UNBOUND_REMOVAL_QUEUE);
    const added = await old.add(
      REMOVE_MEMBER_JOB,
      { ...m, requested_by: 'billing-service' },
      { attempts: 10, backoff: { type: 'removal', delay: 20 } },
    );
    const oldId = added.id ?? '';
    await production.startWorker();
    await sandbox.startWorker();

    // Which environment it was meant for is unknown: no worker guesses.
    await sleep(2_000);
    expect(await old.getJobState(oldId)).toBe('waiting');
    expect(production.standIn.members.totalDeleteCalls() + sandbox.standIn.members.totalDeleteCalls()).toBe(0);

    const report = await runCli(['removals', '--json'], production.env());
    expect(report.code, report.stderr).toBe(0);
    const counts = JSON.parse(report.stdout) as { target: { id: string }; unbound: Record<string, number>; queue: Record<string, number> };
    expect(counts.target.id).toBe(production.target.id);
    expect(counts.unbound).toEqual({ waiting: 1, prioritized: 0, delayed: 0, active: 0, failed: 0 });

    const status = await runCli(['status', '--json'], production.env());
    expect(status.code, status.stdout + status.stderr).toBe(1);
    expect(JSON.parse(status.stdout)).toMatchObject({
      mirror: { available: true, stale: false },
      queues: { reachable: true, unboundRemovals: 1 },
    });
    const statusText = await runCli(['status'], production.env());
    expect(statusText.stdout).toMatch(/UNBOUND +1 removal\(s\) name no target .*removals adopt --all/);

    // The operator knows these were production's: adopt them on a host configured for production.
    const adopt = await runCli(['removals', 'adopt', '--all'], production.env());
    expect(adopt.code, adopt.stderr).toBe(0);
    const moved = new RegExp(`^job ${oldId}: moved to target ${production.target.id} as job (\\S+)$`, 'm').exec(adopt.stdout);
    expect(moved, adopt.stdout).not.toBeNull();
    expect(adopt.stdout).toContain(`1 removal(s) moved to target ${production.target.id}`);
    const newId = moved?.[1] ?? '';

    const queue = createRemovalQueue(producer, { target: production.target, prefix });
    cleanups.push(() => queue.close());
    await eventually(async () => (await queue.getJobState(newId)) === 'completed', 10_000, 'the adopted removal to complete', 20);
    expect((await queue.getJob(newId))?.returnvalue).toMatchObject({
      status: 'succeeded',
      target: production.target.id,
      member_id: m.member_id,
    });
    expect(production.standIn.members.deleteCalls(m.org_id, m.member_id)).toBe(1);
    expect(production.standIn.members.effectiveDeletes(m.org_id, m.member_id)).toBe(1);
    expect(production.standIn.members.has(m.org_id, m.member_id)).toBe(false);
    expect(production.audit.get(newId)).toMatchObject({ status: 'succeeded', requested_by: 'billing-service' });
    expect(sandbox.standIn.members.totalDeleteCalls()).toBe(0);
    expect(sandbox.audit.list()).toHaveLength(0);

    // The old queue is empty, and nothing needs attention any more.
    expect(await old.getJob(oldId)).toBeUndefined();
    expect(await countUnbound(old)).toEqual({ waiting: 0, prioritized: 0, delayed: 0, active: 0, failed: 0 });
    const after = await runCli(['status'], production.env());
    expect(after.code, after.stdout + after.stderr).toBe(0);
    expect(after.stdout).not.toContain('UNBOUND');
  });
});
