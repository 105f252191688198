/**
 * The daemon end to end, as pm2 runs it: `node dist/cli.js daemon` with an
 * IPC channel, a Redis of its own, the stand-in service and a mirror in a
 * temporary directory. One daemon for the whole file, checked step by step.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { enqueueMemberRemoval } from '../jobs/removals/producer.js';
import { createRemovalQueue, type RemovalQueue } from '../jobs/removals/queue-handle.js';
import { startTestRedis, freePort, type TestRedis } from './support/redis-server.js';
import { daemonEnv, getStatus, runCli, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';
import { eventually } from './support/eventually.js';

const USERS = 1_500;

let redis: TestRedis;
let standIn: StandIn;
let dir: string;
let daemon: DaemonProcess;
let env: Record<string, string>;
let statusPort: number;

function mirror<T>(read: (db: Database.Database) => T): T {
  const db = new Database(join(dir, 'mirror.db'), { readonly: true, fileMustExist: true });
  try {
    return read(db);
  } finally {
    db.close();
  }
}

const activeUsers = () => mirror((db) => (db.prepare('SELECT count(*) AS n FROM active_users').get() as { n: number }).n);
const runs = () =>
  mirror(
    (db) =>
      db.prepare('SELECT id, status, error FROM sync_runs ORDER BY id').all() as Array<{
        id: number;
        status: string;
        error: string | null;
      }>,
  );

beforeAll(async () => {
  redis = await startTestRedis();
  standIn = await startStandIn({ port: 0, users: USERS, seed: 11 });
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-daemon-'));
  statusPort = await freePort();
  env = daemonEnv({ redisUrl: redis.url, standIn, mirrorDb: join(dir, 'mirror.db'), queuePrefix: `t${Date.now()}`, statusPort });
  daemon = spawnDaemon(env);
});

afterAll(async () => {
  await daemon?.stop('SIGKILL').catch(() => undefined);
  await standIn?.close();
  await redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('user-mirror daemon', () => {
  it('sends ready over IPC once Redis and the mirror are up', async () => {
    await daemon.ready;
    // Ready once the start-up sync has made the new mirror fresh.
    const ready = await eventually(
      async () => {
        const r = await getStatus(statusPort, '/readyz');
        return r.status === 200 ? r : undefined;
      },
      20_000,
      '/readyz 200',
    );
    expect(JSON.parse(ready.body)).toEqual({ ready: true, checks: { phase: 'ok', db: 'ok', mirror: 'ok', redis: 'ok', removals: 'ok' } });
    const health = await getStatus(statusPort, '/healthz');
    expect(health.status).toBe(200);
  });

  it('syncs on the schedule', async () => {
    // Two scheduled runs, not just the start-up catch-up.
    const scheduled = () => daemon.logs.filter((l) => l.event === 'sync.job_started' && l.reason === 'schedule').length;
    await eventually(() => scheduled() >= 2, 20_000, 'two scheduled syncs');
    await eventually(() => runs().filter((r) => r.status === 'succeeded').length >= 2, 20_000, 'two succeeded runs');
    expect(activeUsers()).toBe(USERS);
    const ticks = daemon.logs.filter((l) => l.event === 'schedule.tick').map((l) => String(l.jobId));
    expect(ticks.length).toBeGreaterThanOrEqual(2);
    expect(ticks.every((id) => /^tick-\d{8}T\d{6}Z$/.test(id))).toBe(true);
    expect(new Set(ticks).size).toBe(ticks.length);
  });

  it('serves Prometheus metrics', async () => {
    const m = await getStatus(statusPort, '/metrics');
    expect(m.status).toBe(200);
    expect(m.contentType).toContain('text/plain');
    expect(m.body).toMatch(/^user_mirror_sync_runs_total\{status="succeeded"\} [1-9]\d*$/m);
    expect(m.body).toMatch(new RegExp(`^user_mirror_users\\{state="active"\\} ${USERS}$`, 'm'));
    expect(m.body).toMatch(/^user_mirror_sync_last_success_timestamp_seconds 1\d{9}(\.\d+)?$/m);
    expect(m.body).toMatch(/^user_mirror_sync_pages_fetched_total [1-9]\d*$/m);
    expect(m.body).toMatch(/^user_mirror_http_responses_total\{method="GET",route="\/v2\/user\/",status="200"\} [1-9]\d*$/m);
    expect(m.body).toMatch(/^user_mirror_queue_jobs\{queue="sync",state="completed"\} [1-9]\d*$/m);
    expect(m.body).toMatch(/^user_mirror_queue_jobs\{queue="removals",state="wait"\} 0$/m);
    expect(m.body).toMatch(/^user_mirror_redis_up 1$/m);
    expect(m.body).toContain('process_resident_memory_bytes');
  });

  it('runs removal jobs from the shared queue and counts their outcomes', async () => {
    const member = standIn.members.list()[0];
    if (member === undefined) throw new Error('stand-in has no members');
    const connection = new Redis(redis.url, { maxRetriesPerRequest: null });
    const queue: RemovalQueue = createRemovalQueue(connection, { target: env.MANAGEMENT_URL ?? '', prefix: env.QUEUE_PREFIX });
    try {
      const { jobId } = await enqueueMemberRemoval(queue, {
        org_id: member.orgId,
        member_id: member.memberId,
        requested_by: 'daemon-test',
      });
      await eventually(async () => (await queue.getJobState(jobId)) === 'completed', 20_000, 'removal completed');
      expect(standIn.members.has(member.orgId, member.memberId)).toBe(false);
    } finally {
      await queue.close();
      connection.disconnect();
    }
    const m = await getStatus(statusPort, '/metrics');
    expect(m.body).toMatch(/^user_mirror_removal_jobs_total\{outcome="succeeded"\} 1$/m);
    expect(m.body).toMatch(
      /^user_mirror_http_responses_total\{method="DELETE",route="\/v1\/org\/\{org_id\}\/member\/\{member_id\}",status="200"\} 1$/m,
    );
    // The test's Redis has AOF and noeviction: removals run.
    expect(m.body).toMatch(/^user_mirror_redis_durable 1$/m);
    expect(m.body).toMatch(/^user_mirror_removals_held 0$/m);
  });

  it('reports through `status --json`', async () => {
    const res = await runCli(['status', '--json'], env);
    expect(res.code).toBe(0);
    const report = JSON.parse(res.stdout) as {
      mirror: { available: boolean; activeUsers: number; stale: boolean; lastRuns: Array<{ status: string }>; ageSeconds: number };
      queues: {
        reachable: boolean;
        sync: { completed: number };
        removals: { counts: { completed: number }; hosts: Array<{ host: string }> };
        unboundRemovals: number;
      };
      failedRemovals: { queue: number | null; audit: number | null };
      removalQueue: { state: string; durable: boolean; redis: Record<string, string> };
    };
    expect(report.mirror).toMatchObject({ available: true, activeUsers: USERS, stale: false });
    expect(report.mirror.lastRuns.length).toBeGreaterThan(0);
    expect(report.mirror.lastRuns.some((r) => r.status === 'succeeded')).toBe(true);
    expect(report.queues.reachable).toBe(true);
    expect(report.queues.sync.completed).toBeGreaterThan(0);
    expect(report.queues.removals.counts.completed).toBe(1);
    expect(report.queues.removals.hosts).toEqual([expect.objectContaining({ host: hostname(), outcomes: { succeeded: 1 } })]);
    expect(report.queues.unboundRemovals).toBe(0);
    expect(report.failedRemovals).toEqual({ queue: 0, audit: 0 });
    expect(report.removalQueue).toMatchObject({
      state: 'run',
      durable: true,
      redis: { appendonly: 'yes', appendfsync: 'always', maxmemoryPolicy: 'noeviction' },
    });

    const human = await runCli(['status'], env);
    expect(human.code).toBe(0);
    expect(human.stdout).toContain(`${USERS} active`);
    expect(human.stdout).toMatch(/sync +waiting \d+ +active \d+/);
    expect(human.stdout).toMatch(/removal queue +durable\n +redis +appendonly yes, appendfsync always, maxmemory-policy noeviction/);
  });

  it('records a failed run and leaves the mirror alone while the service is down', async () => {
    standIn.faults.set({ rate503: 1, retryAfter: null });
    const before = runs().length;
    try {
      const failed = await eventually(
        () =>
          runs()
            .slice(before)
            .find((r) => r.status === 'failed'),
        20_000,
        'a failed run',
      );
      expect(failed.error).toMatch(/first page failed/);
      expect(activeUsers()).toBe(USERS);
      expect(daemon.child.exitCode).toBeNull();
    } finally {
      standIn.faults.clear();
    }
    await eventually(() => runs().at(-1)?.status === 'succeeded', 20_000, 'a succeeded run after recovery');
    const m = await getStatus(statusPort, '/metrics');
    expect(m.body).toMatch(/^user_mirror_sync_runs_total\{status="failed"\} [1-9]\d*$/m);
    expect(m.body).toMatch(/^user_mirror_http_responses_total\{method="GET",route="\/v2\/user\/",status="503"\} [1-9]\d*$/m);
  });

  it('stops gracefully on SIGTERM with exit code 0', async () => {
    const exit = await daemon.stop('SIGTERM', 20_000);
    expect(exit).toEqual({ code: 0, signal: null });
    expect(daemon.logs.some((l) => l.event === 'daemon.stopped')).toBe(true);
    const integrity = mirror((db) => db.pragma('integrity_check', { simple: true }));
    expect(integrity).toBe('ok');
    expect(runs().every((r) => r.status !== 'running')).toBe(true);
  });
});
