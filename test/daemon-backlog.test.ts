/**
 * A sync that takes far longer than the schedule interval: ticks must not
 * pile up behind it, and the watchdog must leave it alone.
 *
 * The stand-in answers each list page only after a long pause while the
 * schedule ticks every second. Throughout: at most one sync job waiting,
 * no watchdog restart, no two runs at once. Once the service is fast again,
 * the one waiting job runs right after the slow one.
 *
 * With two daemons on one MIRROR_ID and one file, the idle peer takes each
 * tick's job and skips it (the lease is held), so nothing waits either; the
 * runs still never overlap.
 *
 * And a daemon that starts while another process's sync holds the mirror's
 * write lock waits for it instead of exiting.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../db/migrate.js';
import { MIGRATIONS } from '../db/migrations.js';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { syncQueueName } from '../jobs/sync/contract.js';
import { startTestRedis, freePort, type TestRedis } from './support/redis-server.js';
import { daemonEnv, spawnDaemon, type DaemonProcess, type LogLine } from './support/daemon-process.js';
import { expectRunsNeverOverlap, readRuns as readMirrorRuns } from './support/sync-runs.js';
import { eventually } from './support/eventually.js';

const SLOW_PAGE_MS = 10_000;
const LATEST = Math.max(...MIGRATIONS.map((m) => m.version));

let redis: TestRedis;
let standIn: StandIn;
let dir: string;
let daemons: DaemonProcess[] = [];

const readRuns = (file: string) => readMirrorRuns(join(dir, file));

beforeAll(async () => {
  redis = await startTestRedis();
  standIn = await startStandIn({ port: 0, users: 50, seed: 5 });
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-backlog-'));
});

afterEach(async () => {
  await Promise.all(daemons.map((d) => d.stop('SIGKILL').catch(() => undefined)));
  daemons = [];
  standIn.faults.clear();
});

afterAll(async () => {
  await standIn?.close();
  await redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function start(count: number, mirrorId: string): Promise<DaemonProcess[]> {
  standIn.faults.set({ pathPrefix: '/v2/user/', latencyMs: SLOW_PAGE_MS });
  for (let i = 0; i < count; i++) {
    const env = daemonEnv({
      redisUrl: redis.url,
      standIn,
      mirrorDb: join(dir, `${mirrorId}.db`),
      queuePrefix: 'backlog',
      statusPort: await freePort(),
      mirrorId,
      cron: '* * * * * *',
      extra: { HTTP_HEADERS_TIMEOUT_MS: '60000', WATCHDOG_STALL_MS: '3000' },
    });
    daemons.push(spawnDaemon(env));
  }
  await Promise.all(daemons.map((d) => d.ready));
  return daemons;
}

/** Samples the queue's waiting and active counts for `ms`. */
async function sampleQueue(mirrorId: string, ms: number): Promise<Array<{ waiting: number; active: number }>> {
  const connection = new Redis(redis.url, { maxRetriesPerRequest: null });
  const queue = new Queue(syncQueueName(mirrorId), { connection, prefix: 'backlog' });
  const samples: Array<{ waiting: number; active: number }> = [];
  try {
    const until = Date.now() + ms;
    while (Date.now() < until) {
      const c = await queue.getJobCounts('wait', 'prioritized', 'delayed', 'active');
      samples.push({ waiting: (c.wait ?? 0) + (c.prioritized ?? 0) + (c.delayed ?? 0), active: c.active ?? 0 });
      await new Promise((r) => setTimeout(r, 250));
    }
    return samples;
  } finally {
    await queue.close();
    connection.disconnect();
  }
}

const all = (ds: DaemonProcess[], event: string): LogLine[] => ds.flatMap((d) => d.logs.filter((l) => l.event === event));
const firstStart = (ds: DaemonProcess[]) =>
  Promise.race(ds.map((d) => d.waitForLog((l) => l.event === 'sync.job_started', 10_000, 'a first sync')));

describe('a sync slower than the schedule', () => {
  it('keeps at most one sync job waiting, folds later ticks into it, and is not a stall', async () => {
    const ds = await start(1, 'slow');
    await firstStart(ds);
    const samples = await sampleQueue('slow', 6_000);
    expect(all(ds, 'schedule.tick_coalesced').length).toBeGreaterThanOrEqual(3);
    expect(samples.some((s) => s.active === 1 && s.waiting === 1)).toBe(true);
    expect(Math.max(...samples.map((s) => s.waiting))).toBeLessThanOrEqual(1);
    expect(Math.max(...samples.map((s) => s.active))).toBeLessThanOrEqual(1);
    expect(all(ds, 'watchdog.restart')).toEqual([]);

    // The service recovers: the slow run ends, the waiting job runs after it, and syncs keep up again.
    standIn.faults.set({ latencyMs: 0 });
    await eventually(() => readRuns('slow.db').filter((r) => r.status === 'succeeded').length >= 3, 40_000, 'three succeeded runs');
    expect(all(ds, 'watchdog.restart')).toEqual([]);
    expect(await ds[0]?.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    expectRunsNeverOverlap(readRuns('slow.db'));
  });

  it('stays that way with two daemons sharing the mirror', async () => {
    const ds = await start(2, 'shared');
    await firstStart(ds);
    const samples = await sampleQueue('shared', 5_000);
    expect(Math.max(...samples.map((s) => s.waiting))).toBeLessThanOrEqual(1);
    expect(all(ds, 'sync.skipped').length + all(ds, 'schedule.tick_coalesced').length).toBeGreaterThanOrEqual(3);
    expect(all(ds, 'watchdog.restart')).toEqual([]);
    standIn.faults.set({ latencyMs: 0 });
    await eventually(() => readRuns('shared.db').filter((r) => r.status === 'succeeded').length >= 2, 40_000, 'two succeeded runs');
    const exits = await Promise.all(ds.map((d) => d.stop('SIGTERM')));
    expect(exits.every((e) => e.code === 0)).toBe(true);
    expectRunsNeverOverlap(readRuns('shared.db'));
    expect(all(ds, 'sync.job_started').length).toBe(readRuns('shared.db').length);
  });
});

/**
 * A daemon starting while another process's sync holds the mirror's write
 * lock, on a file one migration behind (so the open needs the lock): it waits
 * and says so, rather than exit into a pm2 restart loop, and starts once the
 * lock is released.
 */
describe('a daemon starting beside a running sync', () => {
  it('waits for the write lock its migration needs, logs it, then starts', async () => {
    const path = join(dir, 'locked.db');
    const older = new Database(path);
    older.pragma('journal_mode = WAL');
    migrate(
      older,
      MIGRATIONS.filter((m) => m.version < LATEST),
    );
    older.close();

    // The other process's sync: the mirror's write lock, held across the daemon's first attempts.
    const sync = new Database(path);
    sync.exec('BEGIN IMMEDIATE');
    let held = true;
    const env = daemonEnv({
      redisUrl: redis.url,
      standIn,
      mirrorDb: path,
      queuePrefix: 'locked-start',
      statusPort: await freePort(),
      cron: '0 0 1 1 *',
    });
    const daemon = spawnDaemon(env);
    daemons.push(daemon);
    try {
      const waiting = await daemon.waitForLog((l) => l.event === 'daemon.db_locked_at_start', 30_000, 'the wait for the lock');
      expect(waiting).toMatchObject({ file: 'mirror', attempt: 1 });
      expect(daemon.logs.some((l) => l.event === 'daemon.ready')).toBe(false);
      sync.exec('COMMIT');
      held = false;
      await daemon.ready;
    } finally {
      if (held) sync.exec('ROLLBACK');
      sync.close();
    }

    const check = new Database(path, { readonly: true });
    try {
      expect(check.pragma('user_version', { simple: true })).toBe(LATEST);
    } finally {
      check.close();
    }
    expect(await daemon.stop('SIGTERM')).toMatchObject({ code: 0 });
  });
});
