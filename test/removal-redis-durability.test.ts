/**
 * The removal queue and the Redis under it.
 *
 * - With AOF (`appendfsync always`), a Redis SIGKILLed in the middle of a
 *   burst of removals and restarted on the same port and directory loses
 *   nothing: every removal completes, each member is deleted once.
 * - A Redis without persistence loses queued jobs on a restart, which is
 *   why a removal worker refuses it: `worker removals` exits 2 with the
 *   reason and the fix, the daemon holds its removal worker (and says so in
 *   /readyz, /metrics and `status`) while syncing as usual, unless
 *   ALLOW_VOLATILE_REDIS=1. A daemon without removals (no MANAGEMENT_*) says
 *   nothing of holding them, but holds its webhooks and says that.
 *
 * Both Redis servers are the test's own; the machine's Redis is never touched.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../src/runtime/log.js';
import { checkRemovalGate } from '../jobs/redis-durability.js';
import { enqueueMemberRemoval } from '../jobs/removals/producer.js';
import { createRig, deleteRequests, startShared, type Rig, type Shared } from './support/removal-rig.js';
import { requireBuiltCli, runCli, startCli } from './support/cli-process.js';
import { daemonEnv, getStatus, spawnDaemon } from './support/daemon-process.js';
import { freePort } from './support/redis-server.js';
import { SECRET, startReceiver } from './support/webhook-rig.js';
import { eventually } from './support/eventually.js';

const BURST = 300;

describe('a Redis with AOF', () => {
  let shared: Shared;
  let rig: Rig;
  beforeAll(async () => {
    shared = await startShared();
    rig = await createRig(shared);
  });
  afterAll(async () => {
    await rig?.close();
    await shared?.close();
  });

  it('is judged durable', async () => {
    const redis = new Redis(rig.redisUrl);
    try {
      const gate = await checkRemovalGate(redis, false, silentLogger);
      expect(gate).toMatchObject({ state: 'run', volatileAllowed: false });
      expect(gate.verdict.settings).toEqual({ appendonly: 'yes', appendfsync: 'always', maxmemoryPolicy: 'noeviction' });
      // An eviction policy set at runtime is seen too.
      await redis.config('SET', 'maxmemory-policy', 'allkeys-lru');
      const evicting = await checkRemovalGate(redis, false, silentLogger);
      expect(evicting.state).toBe('held');
      expect(evicting.verdict.reasons).toEqual([expect.stringContaining('maxmemory-policy is allkeys-lru, not noeviction')]);
    } finally {
      await redis.config('SET', 'maxmemory-policy', 'noeviction');
      redis.disconnect();
    }
  });

  it(`loses none of ${BURST} removals when Redis is SIGKILLed mid-burst`, async () => {
    const members = Array.from({ length: BURST }, () => rig.member());
    // Slow enough answers that the kill lands with most removals still queued or in flight.
    rig.standIn.faults.set({ latencyMs: 25 });
    await rig.startWorker({ concurrency: 8, lockDurationMs: 2_000 });
    const jobIds = await Promise.all(members.map(async (m) => (await enqueueMemberRemoval(rig.queue, m)).jobId));

    await eventually(() => deleteRequests(rig.standIn) >= BURST / 3, 30_000, 'a third of the removals to reach the service', 20);
    await shared.redis.kill();
    const deletedAtKill = rig.standIn.members.totalDeleteCalls();
    await shared.redis.restart({ downMs: 1_000 });
    rig.standIn.faults.clear();

    for (const jobId of jobIds) expect(await (await rig.finished(jobId, 60_000)).getState()).toBe('completed');
    expect(deletedAtKill).toBeLessThan(BURST);
    for (const m of members) {
      expect(rig.standIn.members.has(m.org_id, m.member_id)).toBe(false);
      expect(rig.standIn.members.effectiveDeletes(m.org_id, m.member_id)).toBe(1);
    }
    await eventually(
      () => rig.audit.list({ limit: BURST * 2 }).filter((r) => r.status === 'succeeded' || r.status === 'already_absent').length === BURST,
      10_000,
      'every audit row finished',
      20,
    );
  });
});

describe('a Redis without persistence', () => {
  let shared: Shared;
  let rig: Rig;
  let dir: string;
  beforeAll(async () => {
    requireBuiltCli('src/commands/worker.js', 'src/commands/daemon.js', 'src/commands/status.js');
    shared = await startShared({ persistence: 'none' });
    rig = await createRig(shared);
    dir = mkdtempSync(join(tmpdir(), 'user-mirror-volatile-'));
  });
  afterAll(async () => {
    await rig?.close();
    await shared?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('holds `worker removals`: exit 2, the reason and the fix, no job taken', async () => {
    const m = rig.member();
    const { jobId } = await enqueueMemberRemoval(rig.queue, m);
    const res = await runCli(['worker', 'removals'], rig.env());
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/refusing to take removal jobs: held: AOF persistence is off/);
    expect(res.stderr).toContain('appendonly yes');
    expect(res.stderr).toContain('ALLOW_VOLATILE_REDIS=1');
    const logged = res.stdout.split('\n').filter((l) => l.includes('"removals.redis_durability"'));
    expect(logged).toHaveLength(1);
    expect(JSON.parse(logged[0] ?? '{}')).toMatchObject({
      level: 50,
      state: 'held',
      appendonly: 'no',
      fix: expect.stringContaining('noeviction'),
    });
    expect(await rig.queue.getJobState(jobId)).toBe('waiting');
    expect(deleteRequests(rig.standIn, m.member_id)).toBe(0);
  });

  it('runs `worker removals` with ALLOW_VOLATILE_REDIS=1, and warns', async () => {
    const m = rig.member();
    const { jobId } = await enqueueMemberRemoval(rig.queue, m);
    const worker = startCli(['worker', 'removals'], rig.env({ ALLOW_VOLATILE_REDIS: '1' }));
    try {
      await worker.line(/ALLOW_VOLATILE_REDIS=1/);
      expect(await (await rig.finished(jobId, 20_000)).getState()).toBe('completed');
      expect(rig.standIn.members.effectiveDeletes(m.org_id, m.member_id)).toBe(1);
    } finally {
      worker.child.kill('SIGTERM');
      expect(await worker.exited()).toBe(0);
    }
  });

  it('holds the daemon’s removal worker and says so; the sync half runs', async () => {
    const port = await freePort();
    const env = daemonEnv({
      redisUrl: rig.redisUrl,
      standIn: rig.standIn,
      mirrorDb: join(dir, 'mirror.db'),
      queuePrefix: rig.prefix,
      statusPort: port,
    });
    const daemon = spawnDaemon(env);
    try {
      await daemon.ready;
      const held = await daemon.waitForLog((l) => l.event === 'removals.redis_durability', 5_000, 'the durability verdict');
      expect(held).toMatchObject({ level: 50, state: 'held', appendonly: 'no' });
      const m = rig.member();
      const { jobId } = await enqueueMemberRemoval(rig.queue, m);
      // Sync is not held: runs finish while the removal waits.
      await daemon.waitForLog((l) => l.event === 'sync.finished', 20_000, 'a sync');

      const ready = await getStatus(port, '/readyz');
      expect(ready.status).toBe(200);
      const body = JSON.parse(ready.body) as { ready: boolean; checks: Record<string, string> };
      expect(body.ready).toBe(true);
      expect(body.checks.removals).toMatch(/^held: AOF persistence is off .*ALLOW_VOLATILE_REDIS=1/);

      const metrics = (await getStatus(port, '/metrics')).body;
      expect(metrics).toMatch(/^user_mirror_removals_held 1$/m);
      expect(metrics).toMatch(/^user_mirror_redis_durable 0$/m);
      expect(metrics).toMatch(/^user_mirror_queue_jobs\{queue="removals",state="wait"\} [1-9]\d*$/m);

      const status = await runCli(['status', '--json'], rig.env({ MIRROR_ID: 'test-mirror' }));
      const report = JSON.parse(status.stdout) as { removalQueue: Record<string, unknown> };
      expect(report.removalQueue).toMatchObject({
        state: 'held',
        durable: false,
        volatileAllowed: false,
        redis: { appendonly: 'no', maxmemoryPolicy: 'noeviction' },
        reasons: [expect.stringMatching(/AOF persistence is off/)],
        fix: expect.stringContaining('appendonly yes'),
      });
      const text = await runCli(['status'], rig.env({ MIRROR_ID: 'test-mirror' }));
      expect(text.stdout).toMatch(/removal queue +HELD: a removal worker takes no job from this Redis/);
      expect(text.stdout).toMatch(/fix +configure Redis with `appendonly yes`/);

      expect(await rig.queue.getJobState(jobId)).toBe('waiting');
      expect(deleteRequests(rig.standIn, m.member_id)).toBe(0);
      expect(await daemon.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    } finally {
      await daemon.stop('SIGKILL').catch(() => undefined);
    }
  });

  it('a daemon without removals says nothing of holding them; its webhooks are held, and said so', async () => {
    const port = await freePort();
    const receiver = await startReceiver();
    const env: Record<string, string> = {
      ...daemonEnv({
        redisUrl: rig.redisUrl,
        standIn: rig.standIn,
        mirrorDb: join(dir, 'sync-only.db'),
        queuePrefix: `${rig.prefix}-sync-only`,
        mirrorId: 'sync-only',
        statusPort: port,
      }),
      WEBHOOK_URL: receiver.url,
      WEBHOOK_SECRET: SECRET,
    };
    delete env.MANAGEMENT_URL;
    delete env.MANAGEMENT_KEY;
    const daemon = spawnDaemon(env);
    try {
      await daemon.ready;
      const heldHooks = await daemon.waitForLog((l) => l.event === 'webhooks.held', 5_000, 'webhooks.held');
      expect(heldHooks.level).toBe(50);
      expect(heldHooks.msg).toMatch(/AOF persistence is off.*appendonly yes.*ALLOW_VOLATILE_REDIS=1/);
      await daemon.waitForLog((l) => l.event === 'sync.finished', 20_000, 'a sync');
      // The only line saying anything is held is the webhooks'; none is the removal worker's verdict.
      expect(daemon.logs.filter((l) => /held/i.test(l.msg ?? ''))).toEqual([heldHooks]);
      expect(daemon.logs.filter((l) => String(l.event).startsWith('removals.'))).toEqual([]);

      const ready = JSON.parse(
        (
          await eventually(async () => {
            const r = await getStatus(port, '/readyz');
            return r.status === 200 ? r : undefined;
          }, 20_000)
        ).body,
      ) as { checks: Record<string, string> };
      expect(ready.checks.removals).toBe('off: MANAGEMENT_URL is unset');
      expect(ready.checks.webhooks).toMatch(/^held: AOF persistence is off.*ALLOW_VOLATILE_REDIS=1/);
      expect(Object.entries(ready.checks).filter(([name, check]) => name !== 'removals' && /removal/i.test(check))).toEqual([]);
      const metrics = (await getStatus(port, '/metrics')).body;
      expect(metrics).toMatch(/^user_mirror_removals_held 0$/m);
      expect(metrics).toMatch(/^user_mirror_redis_durable 0$/m);

      const status = await runCli(['status', '--json'], env);
      expect(status.code, status.stderr).toBe(1);
      const report = JSON.parse(status.stdout) as { removalQueue: unknown; webhooks: { held: string | null } };
      expect(report.removalQueue).toBeNull();
      expect(report.webhooks.held).toMatch(/^held: AOF persistence is off/);
      const text = (await runCli(['status'], env)).stdout;
      expect(text).not.toMatch(/^removal queue/m);
      expect(text).not.toMatch(/removals? (are )?held|HELD: a removal/i);
      expect(text).toMatch(/^webhooks +HELD: the daemon queues no delivery on this Redis: held: AOF persistence is off/m);
      expect(receiver.requests).toEqual([]);
      expect(await daemon.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    } finally {
      await daemon.stop('SIGKILL').catch(() => undefined);
      await receiver.close();
    }
  });

  it('loses queued removals on a restart: why the worker refuses it', async () => {
    const ids = await Promise.all(Array.from({ length: 50 }, async () => (await enqueueMemberRemoval(rig.queue, rig.member())).jobId));
    expect(await rig.queue.count()).toBeGreaterThanOrEqual(50);
    await shared.redis.restart();
    await eventually(async () => (await rig.queue.getJobState(ids[0] ?? '').catch(() => undefined)) === 'unknown', 15_000, 'Redis back');
    for (const id of ids) expect(await rig.queue.getJobState(id)).toBe('unknown');
  });
});
