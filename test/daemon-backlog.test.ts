/**
 * A sync that takes far longer than the schedule interval: ticks must not
 * pile up behind it, and the watchdog must leave it alone.
 *
 * Two daemons share one Redis, one MIRROR_ID and one mirror file; the
 * stand-in answers each list page only after 12 s while the schedule ticks
 * every second. Throughout: at most one sync job running and at most one
 * waiting. Once the service is fast again, the one job kept aside runs right
 * after the slow one, and no two runs overlap.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { syncQueueName } from '../jobs/sync-queue.js';
import { startTestRedis, freePort, type TestRedis } from './support/redis-server.js';
import { daemonEnv, eventually, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';

const PREFIX = 'backlog';
const MIRROR_ID = 'slow';
const SLOW_PAGE_MS = 12_000;

let redis: TestRedis;
let standIn: StandIn;
let dir: string;
const daemons: DaemonProcess[] = [];

interface Run {
  id: number;
  status: string;
  started_at: string;
  finished_at: string | null;
}

function readRuns(): Run[] {
  const db = new Database(join(dir, 'mirror.db'), { readonly: true, fileMustExist: true });
  try {
    return db.prepare('SELECT id, status, started_at, finished_at FROM sync_runs ORDER BY id').all() as Run[];
  } finally {
    db.close();
  }
}

beforeAll(async () => {
  redis = await startTestRedis();
  standIn = await startStandIn({ port: 0, users: 50, seed: 5, faults: { pathPrefix: '/v2/user/', latencyMs: SLOW_PAGE_MS } });
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-backlog-'));
});

afterAll(async () => {
  await Promise.all(daemons.map((d) => d.stop('SIGKILL').catch(() => undefined)));
  await standIn?.close();
  await redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('a sync slower than the schedule', () => {
  it('keeps at most one sync job waiting per mirror, across peers, and is not a stall', async () => {
    const env = async () =>
      daemonEnv({
        redisUrl: redis.url,
        standIn,
        mirrorDb: join(dir, 'mirror.db'),
        queuePrefix: PREFIX,
        statusPort: await freePort(),
        mirrorId: MIRROR_ID,
        cron: '* * * * * *',
        extra: { HTTP_HEADERS_TIMEOUT_MS: '60000', WATCHDOG_STALL_MS: '3000' },
      });
    const [a, b] = [spawnDaemon(await env()), spawnDaemon(await env())];
    daemons.push(a, b);
    await Promise.all([a.ready, b.ready]);

    const connection = new Redis(redis.url, { maxRetriesPerRequest: null });
    const queue = new Queue(syncQueueName(MIRROR_ID), { connection, prefix: PREFIX });
    try {
      const samples: Array<{ waiting: number; active: number }> = [];
      const sample = async () => {
        const c = await queue.getJobCounts('wait', 'prioritized', 'delayed', 'active');
        samples.push({ waiting: (c.wait ?? 0) + (c.prioritized ?? 0) + (c.delayed ?? 0), active: c.active ?? 0 });
      };
      // The slow run is under way and ticks keep coming.
      await a.waitForLog((l) => l.event === 'sync.job_started' || l.event === 'schedule.tick_coalesced', 10_000, 'a first sync or tick');
      const until = Date.now() + 7_000;
      while (Date.now() < until) {
        await sample();
        await new Promise((r) => setTimeout(r, 250));
      }
      const coalesced = [...a.logs, ...b.logs].filter((l) => l.event === 'schedule.tick_coalesced');
      expect(coalesced.length).toBeGreaterThanOrEqual(5);
      expect(samples.some((s) => s.active === 1)).toBe(true);
      expect(Math.max(...samples.map((s) => s.waiting))).toBeLessThanOrEqual(1);
      expect(Math.max(...samples.map((s) => s.active))).toBeLessThanOrEqual(1);
      // Running is not stalled: nobody restarted a worker.
      expect([...a.logs, ...b.logs].filter((l) => l.event === 'watchdog.restart')).toEqual([]);

      // The service recovers: the slow run ends, the job kept aside runs after it, and syncs keep up again.
      standIn.faults.set({ latencyMs: 0 });
      await eventually(() => (readRuns().filter((r) => r.status === 'succeeded').length >= 3 ? true : undefined), 40_000, 'three succeeded runs');
      await sample();
      expect(Math.max(...samples.map((s) => s.waiting))).toBeLessThanOrEqual(1);
    } finally {
      await queue.close();
      connection.disconnect();
    }
    const exits = await Promise.all(daemons.map((d) => d.stop('SIGTERM')));
    expect(exits.every((e) => e.code === 0)).toBe(true);

    const runs = readRuns();
    for (let i = 1; i < runs.length; i++) {
      const prev = runs[i - 1];
      const cur = runs[i];
      if (prev === undefined || cur === undefined) continue;
      expect(prev.finished_at).not.toBeNull();
      expect(cur.started_at >= (prev.finished_at ?? '')).toBe(true);
    }
    expect([...a.logs, ...b.logs].filter((l) => l.event === 'watchdog.restart')).toEqual([]);
  });
});
