/**
 * Redis outages, with the test's own redis-server (stopped and started on
 * the same port; never the machine's Redis).
 *
 * - Down at start: the daemon does not exit, /healthz stays 200, /readyz is
 *   503, no 'ready' is sent; when Redis comes up it starts and sends 'ready'.
 * - Lost later (a crash: the restarted server is empty): the workers resume
 *   by themselves and process jobs enqueued afterwards.
 *
 * The Redis here deliberately has no persistence (so a crash empties it),
 * which is why the daemon runs with ALLOW_VOLATILE_REDIS=1.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { enqueueMemberRemoval } from '../jobs/removals/producer.js';
import { createRemovalQueue } from '../jobs/removals/queue-handle.js';
import { startTestRedis, freePort, type TestRedis } from './support/redis-server.js';
import { daemonEnv, getStatus, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';
import { eventually } from './support/eventually.js';

let redis: TestRedis;
let standIn: StandIn;
let dir: string;
let daemon: DaemonProcess | undefined;

beforeAll(async () => {
  redis = await startTestRedis({ persistence: 'none' });
  standIn = await startStandIn({ port: 0, users: 800, seed: 21 });
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-redis-'));
});

afterEach(async () => {
  await daemon?.stop('SIGKILL').catch(() => undefined);
  daemon = undefined;
});

afterAll(async () => {
  await standIn?.close();
  await redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function spawn(name: string): Promise<{ d: DaemonProcess; port: number; env: Record<string, string> }> {
  const port = await freePort();
  const env = daemonEnv({
    redisUrl: redis.url,
    standIn,
    mirrorDb: join(dir, `${name}.db`),
    queuePrefix: name,
    statusPort: port,
    extra: { ALLOW_VOLATILE_REDIS: '1' },
  });
  daemon = spawnDaemon(env);
  return { d: daemon, port, env };
}

describe('Redis outages', () => {
  it('down at start: keeps retrying, not ready, then starts when Redis comes up', async () => {
    await redis.kill();
    const { d, port } = await spawn('late');
    let ready = false;
    void d.ready.then(() => (ready = true));

    await d.waitForLog((l) => l.event === 'redis.waiting', 10_000, 'the daemon to report waiting for Redis');
    await d.waitForLog((l) => l.event === 'status.listening', 10_000, 'the status endpoint');
    const health = await getStatus(port, '/healthz');
    expect(health.status).toBe(200);
    const notReady = await getStatus(port, '/readyz');
    expect(notReady.status).toBe(503);
    expect(JSON.parse(notReady.body)).toMatchObject({ ready: false, checks: { phase: 'starting', db: 'ok' } });
    await new Promise((r) => setTimeout(r, 2_000));
    expect(ready).toBe(false);
    expect(d.child.exitCode).toBeNull();

    await redis.restart();
    await d.ready;
    await d.waitForLog((l) => l.event === 'sync.finished' && l.status === 'succeeded', 20_000, 'a sync once Redis is up');
    expect((await getStatus(port, '/readyz')).status).toBe(200);
    expect(await d.stop('SIGTERM')).toEqual({ code: 0, signal: null });
  });

  it('lost later: workers resume by themselves and take later jobs', async () => {
    const { d, port, env } = await spawn('restart');
    await d.ready;
    await d.waitForLog((l) => l.event === 'sync.finished', 20_000, 'a first sync');

    await redis.restart({ downMs: 3_000 });
    const restartedAt = Date.now();

    // A sync job enqueued by a tick after the restart runs.
    await d.waitForLog(
      (l) => l.event === 'sync.finished' && l.status === 'succeeded' && typeof l.time === 'number' && l.time > restartedAt,
      30_000,
      'a sync after the Redis restart',
    );
    await eventually(async () => (await getStatus(port, '/readyz')).status === 200, 10_000, 'ready again');

    // And a removal enqueued after the restart is processed.
    const member = standIn.members.list()[0];
    if (member === undefined) throw new Error('stand-in has no members');
    const connection = new Redis(redis.url, { maxRetriesPerRequest: null });
    const queue = createRemovalQueue(connection, { target: env.MANAGEMENT_URL ?? '', prefix: env.QUEUE_PREFIX });
    try {
      const { jobId } = await enqueueMemberRemoval(queue, { org_id: member.orgId, member_id: member.memberId });
      await eventually(async () => (await queue.getJobState(jobId)) === 'completed', 30_000, 'the removal after the restart');
    } finally {
      await queue.close();
      connection.disconnect();
    }
    expect(d.child.exitCode).toBeNull();
    expect(await d.stop('SIGTERM')).toEqual({ code: 0, signal: null });
  });
});
