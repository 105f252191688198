/**
 * Several daemons on one Redis.
 *
 * - Two daemons with the same MIRROR_ID (same queue) and the same mirror
 *   file: every tick yields one job and one sync run between them, never two
 *   syncs at once.
 * - A third daemon with another MIRROR_ID and its own file keeps its own
 *   mirror fresh from its own queue.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { syncQueueName } from '../jobs/sync/contract.js';
import { startTestRedis, freePort, type TestRedis } from './support/redis-server.js';
import { daemonEnv, spawnDaemon, type DaemonProcess, type LogLine } from './support/daemon-process.js';
import { eventually } from './support/eventually.js';
import { expectRunsNeverOverlap, readRuns as readMirrorRuns } from './support/sync-runs.js';

const USERS = 3_000;
const PREFIX = 'peers';

let redis: TestRedis;
let standIn: StandIn;
let dir: string;
const daemons: DaemonProcess[] = [];

const readRuns = (file: string) => readMirrorRuns(join(dir, file));

const jobsStarted = (d: DaemonProcess): LogLine[] => d.logs.filter((l) => l.event === 'sync.job_started');

/** The job ids of the schedule ticks both daemons logged. */
function commonTicks(a: DaemonProcess, b: DaemonProcess): string[] {
  const ticksOf = (d: DaemonProcess) => new Set(d.logs.filter((l) => l.event === 'schedule.tick').map((l) => String(l.jobId)));
  const ticksB = ticksOf(b);
  return [...ticksOf(a)].filter((id) => ticksB.has(id));
}

beforeAll(async () => {
  redis = await startTestRedis();
  // A little latency so a sync takes long enough for a peer to try to overlap it.
  standIn = await startStandIn({ port: 0, users: USERS, seed: 9, faults: { latencyMs: 40 } });
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-peers-'));
});

afterAll(async () => {
  await Promise.all(daemons.map((d) => d.stop('SIGKILL').catch(() => undefined)));
  await standIn?.close();
  await redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('daemons sharing one Redis', () => {
  it('run one sync per tick per mirror, never two at once, each mirror from its own queue', async () => {
    const env = async (mirrorId: string, file: string) =>
      daemonEnv({ redisUrl: redis.url, standIn, mirrorDb: join(dir, file), queuePrefix: PREFIX, statusPort: await freePort(), mirrorId });
    const [a, b, c] = [
      spawnDaemon(await env('shared', 'shared.db')),
      spawnDaemon(await env('shared', 'shared.db')),
      spawnDaemon(await env('other', 'other.db')),
    ];
    daemons.push(a, b, c);
    await Promise.all([a.ready, b.ready, c.ready]);

    // Several ticks at */2 s: waited for by what they leave (three ticks both peers saw, three runs of each mirror),
    // not by a window of wall-clock time, which a busy machine spends on starting three daemons.
    const succeeded = (d: DaemonProcess) => d.logs.filter((l) => l.event === 'sync.finished' && l.status === 'succeeded').length;
    await eventually(
      () => commonTicks(a, b).length >= 3 && jobsStarted(a).length + jobsStarted(b).length >= 3 && succeeded(c) >= 3,
      60_000,
      () => `three shared ticks and three runs of each mirror; ticks in both: ${commonTicks(a, b).length}`,
    );
    const exits = await Promise.all(daemons.map((d) => d.stop('SIGTERM')));
    expect(exits.every((e) => e.code === 0)).toBe(true);

    // Both peers saw the ticks and named the same jobs.
    const both = commonTicks(a, b);
    expect(both.length).toBeGreaterThanOrEqual(3);

    const connection = new Redis(redis.url, { maxRetriesPerRequest: null });
    const queue = new Queue(syncQueueName('shared'), { connection, prefix: PREFIX });
    try {
      const jobs = await queue.getJobs(['completed', 'failed', 'active', 'wait', 'delayed']);
      const tickJobs = jobs.map((j) => String(j.id)).filter((id) => id.startsWith('tick-'));
      // Exactly one job per tick, although two daemons enqueued each of them.
      expect(new Set(tickJobs).size).toBe(tickJobs.length);
      for (const id of both) expect(tickJobs.filter((t) => t === id)).toHaveLength(1);
    } finally {
      await queue.close();
      connection.disconnect();
    }

    // Each job ran once, in one of the two peers; every run of the shared mirror is one of those.
    const started = [...jobsStarted(a), ...jobsStarted(b)].map((l) => String(l.jobId));
    expect(new Set(started).size).toBe(started.length);
    for (const id of both) expect(started.filter((s) => s === id).length).toBeLessThanOrEqual(1);
    const shared = readRuns('shared.db');
    expect(shared.length).toBe(started.length);
    expect(shared.length).toBeGreaterThanOrEqual(3);

    // Never two at once: runs do not overlap, and none was cut short by a rival's beginRun.
    expect(shared.filter((r) => r.error === 'interrupted')).toEqual([]);
    expectRunsNeverOverlap(shared);

    // The other mirror kept itself fresh from its own queue.
    const other = readRuns('other.db');
    expect(other.length).toBe(jobsStarted(c).length);
    expect(other.filter((r) => r.status === 'succeeded').length).toBeGreaterThanOrEqual(3);
  });
});
