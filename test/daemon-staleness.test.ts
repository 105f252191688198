/**
 * Staleness as an operator sees it, against the daemon as a process: the
 * service starts failing, the mirror's last success ages past
 * SYNC_STALE_AFTER_MS, and /readyz (503), /metrics and `status` (exit 1)
 * all say so with the last failure's reason; when the service recovers they
 * all turn back. `status` also exits 1, still printing the mirror, when
 * Redis is unreachable.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { startTestRedis, freePort, type TestRedis } from './support/redis-server.js';
import { daemonEnv, getStatus, runCli, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';
import { eventually } from './support/eventually.js';

const USERS = 300;

let redis: TestRedis;
let standIn: StandIn;
let dir: string;
let daemon: DaemonProcess | undefined;

beforeAll(async () => {
  redis = await startTestRedis();
  standIn = await startStandIn({ port: 0, users: USERS, seed: 21 });
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-stale-'));
});

afterAll(async () => {
  await daemon?.stop('SIGKILL').catch(() => undefined);
  await standIn?.close();
  await redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const readyz = async (port: number) => {
  const r = await getStatus(port, '/readyz');
  return { status: r.status, body: JSON.parse(r.body) as { ready: boolean; checks: Record<string, string> } };
};
const metric = async (port: number, name: string) => {
  const body = (await getStatus(port, '/metrics')).body;
  const line = body.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
};

describe('a mirror that goes stale', () => {
  it('is reported by /readyz, /metrics and status, with the last failure, until a sync succeeds again', async () => {
    const port = await freePort();
    const env = daemonEnv({
      redisUrl: redis.url,
      standIn,
      mirrorDb: join(dir, 'mirror.db'),
      queuePrefix: 'stale',
      statusPort: port,
      extra: { SYNC_STALE_AFTER_MS: '4000' },
    });
    daemon = spawnDaemon(env);
    await daemon.ready;
    await eventually(async () => (await readyz(port)).status === 200, 20_000, 'ready after the first sync');
    // Fresh is within 4 s of the last good sync, a window a busy machine can spend between two requests: the gauge is
    // asked until it says fresh while syncs succeed (it must say stale, below, once they fail).
    await eventually(
      async () => (await metric(port, 'user_mirror_mirror_stale')) === 0,
      30_000,
      'the stale gauge at 0 while syncs succeed',
    );
    expect(await metric(port, 'user_mirror_mirror_stale_after_seconds')).toBe(4);
    expect(await metric(port, 'user_mirror_sync_last_attempt_failed')).toBe(0);

    standIn.faults.set({ rate503: 1, retryAfter: null });
    const notReady = await eventually(
      async () => {
        const r = await readyz(port);
        // Stale by age alone comes first when a busy machine's syncs take longer than 4 s; the failed run follows.
        return r.status === 503 && r.body.checks.mirror?.includes('last failed run #') === true ? r : undefined;
      },
      60_000,
      '/readyz 503 once stale, with the failed run',
    );
    expect(notReady.body.ready).toBe(false);
    expect(notReady.body.checks).toMatchObject({ phase: 'ok', db: 'ok', redis: 'ok' });
    expect(notReady.body.checks.mirror).toMatch(
      /^stale: last successful sync \d+s ago, more than SYNC_STALE_AFTER_MS \(4s\); last failed run #\d+ /,
    );
    expect(await metric(port, 'user_mirror_mirror_stale')).toBe(1);
    expect(await metric(port, 'user_mirror_mirror_age_seconds')).toBeGreaterThanOrEqual(4);
    // The last attempt failed, as status says (LAST SYNC FAILED): what UserMirrorSyncFailed alerts on.
    // Read from the same runs as /readyz but on its own scrape: a run may finish between the two, so wait for it.
    await eventually(async () => (await metric(port, 'user_mirror_sync_last_attempt_failed')) === 1, 30_000, 'the last-attempt gauge at 1');

    const text = await runCli(['status'], env);
    expect(text.code, text.stderr).toBe(1);
    expect(text.stdout).toMatch(/STALE +last successful sync \d+s ago, more than SYNC_STALE_AFTER_MS \(4s\); last failed run #\d+/);
    const json = await runCli(['status', '--json'], env);
    expect(json.code).toBe(1);
    const report = JSON.parse(json.stdout) as {
      mirror: { stale: boolean; staleAfterSeconds: number; staleReason: string; ageSeconds: number };
    };
    expect(report.mirror).toMatchObject({ stale: true, staleAfterSeconds: 4 });
    expect(report.mirror.staleReason).toContain('last failed run #');
    expect(report.mirror.ageSeconds).toBeGreaterThanOrEqual(4);

    standIn.faults.clear();
    await eventually(async () => (await readyz(port)).status === 200, 30_000, 'ready again after a succeeded sync');
    // /metrics reads the mirror at most once a second (a scrape within that second gets the last figures).
    await eventually(async () => (await metric(port, 'user_mirror_mirror_stale')) === 0, 3_000, 'stale gauge back to 0');
    await eventually(
      async () => (await metric(port, 'user_mirror_sync_last_attempt_failed')) === 0,
      3_000,
      'last attempt no longer failed',
    );

    // Fresh and Redis up: 0. Redis unreachable: 1, and the mirror is still reported.
    const calm = { ...env, SYNC_STALE_AFTER_MS: '600000' };
    expect((await runCli(['status'], calm)).code).toBe(0);
    const noRedis = await runCli(['status'], { ...calm, REDIS_URL: `redis://127.0.0.1:${await freePort()}` });
    expect(noRedis.code).toBe(1);
    expect(noRedis.stdout).toContain(`${USERS} active`);
    expect(noRedis.stdout).toContain('redis unreachable');
    expect(noRedis.stdout).not.toContain('STALE');

    expect(await daemon.stop('SIGTERM')).toEqual({ code: 0, signal: null });
  });
});
