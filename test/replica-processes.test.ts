/**
 * The replica as operators run it: `user-mirror serve` on its own, and the
 * daemon with REPLICA_PORT set, as child processes over a mirror synced from
 * the stand-in. The official SDK keeps resolving from the daemon's replica
 * once the service is gone. Needs `npm run build` first.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VitalClient } from '@tryvital/vital-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { requireBuiltCli, startCli } from './support/cli-process.js';
import { daemonEnv, runCli, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';
import { startTestRedis, freePort, type TestRedis } from './support/redis-server.js';
import { createSyncRig, type SyncRig } from './support/sync-rig.js';
import { SDK_KEY_HEADER } from './support/replica-rig.js';
import { eventually } from './support/eventually.js';

const sdkAt = (port: number, apiKey: string) => new VitalClient({ apiKey, baseUrl: `http://127.0.0.1:${port}`, maxRetries: 0 });

describe('user-mirror serve', () => {
  let rig: SyncRig;
  beforeAll(async () => {
    requireBuiltCli('src/commands/serve.js');
    rig = await createSyncRig({ users: 300, seed: 4 });
    await rig.sync();
  });
  afterAll(() => rig?.close());

  it("serves the official SDK as docs/replica.md's first example configures it (no header set); a 401 names the headers", async () => {
    // The example's line, as written: its variables are the whole configuration, but for a free port
    // in place of the fixed 8788 on this shared machine (test/doc-recipes.test.ts runs it on 8788 in a namespace).
    const page = readFileSync(new URL('../docs/replica.md', import.meta.url), 'utf8');
    const line = page.split('\n').find((l) => / user-mirror serve\b/.test(l) && !l.startsWith('REPLICA_WORKERS'));
    const assignments = (line ?? '').split(' user-mirror serve')[0]?.split(' ') ?? [];
    const given = Object.fromEntries(assignments.map((a) => a.split('=') as [string, string]));
    expect(Object.keys(given)).toEqual(['MIRROR_DB', 'REPLICA_API_KEY']);
    const cwd = mkdtempSync(join(tmpdir(), 'replica-doc-'));
    mkdirSync(join(cwd, 'data'));
    rig.db.prepare('VACUUM INTO ?').run(join(cwd, given.MIRROR_DB ?? ''));
    const port = await freePort();
    const serve = startCli(['serve'], { PATH: process.env.PATH, ...given, REPLICA_PORT: String(port) }, { cwd });
    try {
      await serve.line(/"event":"replica.listening"/);
      const [first] = rig.standIn.directory.page(0, 1);
      const user = await sdkAt(port, given.REPLICA_API_KEY ?? '').user.getByClientUserId(String(first?.client_user_id));
      expect(user.userId).toBe(first?.user_id);
      const listed = await sdkAt(port, given.REPLICA_API_KEY ?? '').user.getAll({ offset: 0, limit: 500 });
      expect(listed.total).toBe(300);
      const refused = await fetch(`http://127.0.0.1:${port}/v2/user`, { headers: { authorization: `Bearer ${given.REPLICA_API_KEY}` } });
      expect(refused.status).toBe(401);
      expect(await refused.json()).toEqual({
        detail: 'Missing or invalid API key (expected in the header x-service-api-key or x-vital-api-key)',
      });
    } finally {
      serve.child.kill('SIGTERM');
      expect(await serve.exited()).toBe(0);
      rmSync(cwd, { recursive: true, force: true });
    }
  });

  it('generates a key when none is set, prints it once, and serves the SDK with it', async () => {
    const port = await freePort();
    const env = { PATH: process.env.PATH, MIRROR_DB: rig.dbPath, REPLICA_PORT: String(port), REPLICA_API_KEY_HEADER: SDK_KEY_HEADER };
    const serve = startCli(['serve'], env);
    try {
      const line = await serve.line(/^REPLICA_API_KEY=/);
      await serve.line(/"event":"replica.listening"/);
      const key = line.slice('REPLICA_API_KEY='.length);
      expect(key).toMatch(/^rk_[0-9a-f]{48}$/);
      const [first] = rig.standIn.directory.page(0, 1);
      const user = await sdkAt(port, key).user.getByClientUserId(String(first?.client_user_id));
      expect(user.userId).toBe(first?.user_id);
      await expect(sdkAt(port, 'rk_other').user.getAll({})).rejects.toMatchObject({ statusCode: 401 });
      expect(serve.stdout().split(key).length - 1).toBe(1);
    } finally {
      serve.child.kill('SIGTERM');
      expect(await serve.exited()).toBe(0);
    }
  });

  it('with REPLICA_WORKERS=2 answers from two processes on one port, restarts a worker that dies, stops them all', async () => {
    const port = await freePort();
    const env = {
      PATH: process.env.PATH,
      MIRROR_DB: rig.dbPath,
      REPLICA_PORT: String(port),
      REPLICA_API_KEY_HEADER: SDK_KEY_HEADER,
      REPLICA_WORKERS: '2',
    };
    const serve = startCli(['serve'], env);
    const pid = serve.child.pid ?? 0;
    const workers = () =>
      execFileSync('pgrep', ['-P', String(pid)], { encoding: 'utf8' })
        .trim()
        .split('\n')
        .filter((l) => l !== '')
        .map(Number);
    try {
      const key = (await serve.line(/^REPLICA_API_KEY=/)).slice('REPLICA_API_KEY='.length);
      expect(workers()).toHaveLength(2);
      const users = rig.standIn.directory.page(0, 40);
      const sdk = sdkAt(port, key);
      const got = await Promise.all(users.map((u) => sdk.user.getByClientUserId(String(u.client_user_id))));
      expect(got.map((u) => u.userId)).toEqual(users.map((u) => u.user_id));
      const [victim] = workers();
      process.kill(victim ?? 0, 'SIGKILL');
      await eventually(() => workers().length === 2 && !workers().includes(victim ?? 0), 10_000, 'a worker restarted');
      // A keep-alive connection the dead worker held fails once (a client retries it); answers then come from the rest.
      const after = await eventually(
        () => sdk.user.getByClientUserId(String(users[0]?.client_user_id)),
        10_000,
        'an answer after the restart',
      );
      expect(after.userId).toBe(users[0]?.user_id);
      expect(serve.stdout().split(key).length - 1).toBe(1);
    } finally {
      serve.child.kill('SIGTERM');
      expect(await serve.exited()).toBe(0);
    }
    expect(() => execFileSync('pgrep', ['-P', String(pid)])).toThrow();
  });

  it('refuses to start with the service key as its key (exit 2, the key never printed)', async () => {
    const key = rig.standIn.apiKey;
    const run = await runCli(['serve'], { MIRROR_DB: rig.dbPath, REPLICA_PORT: '0', REPLICA_API_KEY: key, SERVICE_API_KEY: key });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('REPLICA_API_KEY: must differ from SERVICE_API_KEY');
    expect(run.stdout + run.stderr).not.toContain(key);
  });
});

describe('the daemon with REPLICA_PORT set', () => {
  let redis: TestRedis;
  let standIn: StandIn | undefined;
  let dir: string;
  let daemon: DaemonProcess | undefined;

  beforeAll(async () => {
    requireBuiltCli();
    redis = await startTestRedis();
    standIn = await startStandIn({ port: 0, users: 800, seed: 12 });
    dir = mkdtempSync(join(tmpdir(), 'user-mirror-replica-daemon-'));
  });
  afterAll(async () => {
    await daemon?.stop('SIGKILL').catch(() => undefined);
    await standIn?.close();
    await redis?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const envFor = async (s: StandIn, extra: Record<string, string>) =>
    daemonEnv({
      redisUrl: redis.url,
      standIn: s,
      mirrorDb: join(dir, 'mirror.db'),
      queuePrefix: `r${Date.now()}`,
      statusPort: await freePort(),
      extra,
    });

  it('refuses to start without REPLICA_API_KEY (exit 2)', async () => {
    const s = standIn as StandIn;
    const run = await runCli(['daemon'], await envFor(s, { REPLICA_PORT: '0' }));
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('REPLICA_API_KEY: is required when REPLICA_PORT is set');
  });

  it('serves the replica; the SDK resolves from it with the service unreachable', async () => {
    const s = standIn as StandIn;
    const port = await freePort();
    const key = 'rk_daemon_replica_key';
    const env = await envFor(s, {
      REPLICA_PORT: String(port),
      REPLICA_API_KEY: key,
      REPLICA_API_KEY_HEADER: SDK_KEY_HEADER,
      REPLICA_MAX_CONNECTIONS: '300',
    });
    daemon = spawnDaemon(env);
    await daemon.ready;
    // The replica's connection figures are on the daemon's status /metrics as well as on the replica's own.
    for (const url of [`http://127.0.0.1:${env.STATUS_PORT}/metrics`, `http://127.0.0.1:${port}/metrics`]) {
      expect(await (await fetch(url)).text(), url).toMatch(/^user_mirror_replica_connections_max 300$/m);
    }
    await eventually(async () => (await fetch(`http://127.0.0.1:${port}/readyz`)).status === 200, 30_000, 'replica ready');
    const wanted = s.directory.page(0, 20).map((u) => ({ clientUserId: String(u.client_user_id), userId: String(u.user_id) }));
    await s.close();
    standIn = undefined;
    const sdk = sdkAt(port, key);
    for (const w of wanted) expect((await sdk.user.getByClientUserId(w.clientUserId)).userId).toBe(w.userId);
    const page = await sdk.user.getAll({ limit: 5 });
    expect(page.total).toBe(800);
    const exit = await daemon.stop('SIGTERM');
    expect(exit.code).toBe(0);
  });
});
