/**
 * What removal tests share: a Redis of their own, the stand-in service, and
 * per test a fresh queue prefix (so tests never see each other's jobs), a
 * producer queue, an audit database and workers on demand.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach } from 'vitest';
import type { Job } from 'bullmq';
import type { Db } from '../../db/open.js';
import { openAudit } from '../../db/open-audit.js';
import { createRemovalAudit, type RemovalAudit } from '../../db/removal-audit.js';
import { silentLogger } from '../../src/runtime/log.js';
import { startStandIn, type StandIn } from '../../src/stand-in/index.js';
import type { ServiceClient } from '../../src/service/client.js';
import { createRedisConnection, type RedisClient } from '../../jobs/redis-connection.js';
import { type ManagementTarget } from '../../jobs/removals/contract.js';
import { managementClientFromConfig } from '../../src/service/client-from-config.js';
import { createRemovalQueue, type RemovalQueue } from '../../jobs/removals/queue-handle.js';
import { startRemovalWorker, type RemovalWorkerHandle, type RemovalWorkerOptions } from '../../jobs/removals/worker.js';
import { eventually } from './eventually.js';
import { startTestRedis, type TestRedis, type TestRedisOptions } from './redis-server.js';
import { urlTarget } from '../../jobs/url-target.js';
import { auditPathFor } from '../../db/audit-location.js';

export interface Shared {
  redis: TestRedis;
  standIn: StandIn;
  close(): Promise<void>;
}

export async function startShared(options: TestRedisOptions = {}): Promise<Shared> {
  const redis = await startTestRedis(options);
  const standIn = await startStandIn({ users: 0, orgs: 0, membersPerOrg: 0, seed: 7 });
  return {
    redis,
    standIn,
    async close() {
      await standIn.close();
      await redis.stop();
    },
  };
}

export interface Rig {
  prefix: string;
  redisUrl: string;
  /** The stand-in's management target: the queue and the worker's. */
  target: ManagementTarget;
  standIn: StandIn;
  queue: RemovalQueue;
  /** The audit database (AUDIT_DB). */
  db: Db;
  /** MIRROR_DB: the audit lives next to it, at `auditPath`. */
  dbPath: string;
  auditPath: string;
  audit: RemovalAudit;
  /** A member that exists in the stand-in. */
  member(): { org_id: string; member_id: string };
  startWorker(overrides?: Partial<RemovalWorkerOptions>): Promise<RemovalWorkerHandle>;
  /** Resolves with the job once it is completed or failed. */
  finished(jobId: string, timeoutMs?: number): Promise<Job>;
  /** Env for a child `node dist/cli.js ...` on this rig. */
  env(extra?: Record<string, string>): NodeJS.ProcessEnv;
  close(): Promise<void>;
}

export async function createRig(shared: Shared): Promise<Rig> {
  const { redis, standIn } = shared;
  const prefix = `t${randomUUID().slice(0, 8)}`;
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-removals-'));
  const dbPath = join(dir, 'mirror.db');
  const auditPath = auditPathFor(dbPath);
  const db = openAudit(auditPath);
  const audit = createRemovalAudit(db);
  const producer = createRedisConnection(redis.url, { role: 'producer' });
  const target = urlTarget(standIn.managementUrl);
  const queue = createRemovalQueue(producer, { target, prefix });
  const workers: Array<{ handle: RemovalWorkerHandle; redis: RedisClient; client: ServiceClient }> = [];

  return {
    prefix,
    redisUrl: redis.url,
    target,
    standIn,
    queue,
    db,
    dbPath,
    auditPath,
    audit,
    member() {
      const m = { org_id: randomUUID(), member_id: randomUUID() };
      standIn.members.add(m.org_id, m.member_id);
      return m;
    },
    async startWorker(overrides = {}) {
      const workerRedis = createRedisConnection(redis.url, { role: 'worker' });
      const client = standInManagementClient(standIn);
      const handle = startRemovalWorker({
        connection: workerRedis,
        target,
        prefix,
        client,
        audit,
        logger: silentLogger,
        concurrency: 8,
        backoffMs: 20,
        ...overrides,
      });
      workers.push({ handle, redis: workerRedis, client });
      await handle.waitUntilReady();
      return handle;
    },
    async finished(jobId, timeoutMs = 20_000) {
      let state = 'not read yet';
      return eventually(
        async () => {
          state = await queue.getJobState(jobId);
          return state === 'completed' || state === 'failed' ? queue.getJob(jobId) : undefined;
        },
        timeoutMs,
        () => `job ${jobId} to finish (state ${state})`,
        25,
      );
    },
    env(extra = {}) {
      return {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        REDIS_URL: redis.url,
        QUEUE_PREFIX: prefix,
        MANAGEMENT_URL: standIn.managementUrl,
        MANAGEMENT_KEY: standIn.managementKey,
        MIRROR_DB: dbPath,
        AUDIT_DB: auditPath,
        LOG_LEVEL: 'info',
        ...extra,
      };
    },
    async close() {
      for (const w of workers) {
        await w.handle.close(5_000);
        await w.client.close();
        w.redis.disconnect();
      }
      await queue.close();
      producer.disconnect();
      db.close();
      rmSync(dir, { recursive: true, force: true });
      standIn.faults.clear();
    },
  };
}

/** A management client for the stand-in, as a removal worker of concurrency 8 builds one. */
export function standInManagementClient(standIn: Pick<StandIn, 'managementUrl' | 'managementKey'>): ServiceClient {
  return managementClientFromConfig(
    {
      MANAGEMENT_URL: standIn.managementUrl,
      MANAGEMENT_KEY: standIn.managementKey,
      HTTP_CONNECTIONS: 8,
      HTTP_HEADERS_TIMEOUT_MS: 30_000,
      HTTP_BODY_TIMEOUT_MS: 30_000,
    },
    8,
  );
}

/** DELETE requests the stand-in received for one member (or for any). */
export function deleteRequests(standIn: StandIn, memberId?: string): number {
  return standIn.requests.entries().filter((e) => e.method === 'DELETE' && (memberId === undefined || e.path.includes(memberId))).length;
}

/**
 * The lifecycle every removal test file shares: one Redis and stand-in per
 * file, a fresh rig (queue, worker, audit) per test, all closed afterwards.
 * `onReady` receives them before each test.
 */
export function useRemovalRig(onReady: (shared: Shared, rig: Rig) => void): void {
  let shared: Shared | undefined;
  let rig: Rig | undefined;
  beforeAll(async () => {
    shared = await startShared();
  });
  afterAll(async () => {
    await shared?.close();
  });
  beforeEach(async () => {
    if (shared === undefined) throw new Error('useRemovalRig: the shared Redis and stand-in did not start');
    rig = await createRig(shared);
    onReady(shared, rig);
  });
  afterEach(async () => {
    await rig?.close();
  });
}
