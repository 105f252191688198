/**
 * A mirror deleted or replaced under the running daemon (a real daemon
 * process, its sync children and its replica): noticed by device and inode,
 * never silently restarted as a new history. /readyz fails naming it,
 * /metrics shows user_mirror_mirror_file_lost{reason}, every sync is refused
 * (no new file appears at MIRROR_DB), the replica stops serving the old
 * file, and `status` exits 1 saying what happened; a restart adopts the file
 * then at MIRROR_DB.
 */
import { copyFileSync, existsSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { startTestRedis, freePort, type TestRedis } from './support/redis-server.js';
import { daemonEnv, getStatus, runCli, spawnDaemon, type DaemonProcess, type LogLine } from './support/daemon-process.js';
import { eventually } from './support/eventually.js';
import { startCli } from './support/cli-process.js';

const REPLICA_KEY = 'rk_0123456789abcdef0123456789abcdef0123456789abcdef';

let redis: TestRedis;
let standIn: StandIn;
let dir: string;
let daemon: DaemonProcess | undefined;

beforeAll(async () => {
  redis = await startTestRedis();
  standIn = await startStandIn({ port: 0, users: 200, seed: 64 });
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-replaced-'));
});
// The replaced case slows the service for one job; no other test inherits it.
afterEach(() => standIn.faults.set({ latencyMs: 0 }));
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
const lostGauge = async (port: number, reason: string) => {
  const body = (await getStatus(port, '/metrics')).body;
  const line = body.split('\n').find((l) => l.startsWith(`user_mirror_mirror_file_lost{reason="${reason}"} `));
  return line === undefined ? undefined : Number(line.split(' ')[1]);
};
const replicaAnswers = async (port: number): Promise<boolean> => {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/v2/user/?limit=1`, { headers: { 'x-vital-api-key': REPLICA_KEY } });
    return res.status === 200;
  } catch {
    return false;
  }
};

async function startOn(mirrorDb: string, prefix: string): Promise<{ env: Record<string, string>; port: number; replicaPort: number }> {
  const port = await freePort();
  const replicaPort = await freePort();
  const env = daemonEnv({
    redisUrl: redis.url,
    standIn,
    mirrorDb,
    queuePrefix: prefix,
    statusPort: port,
    extra: { REPLICA_PORT: String(replicaPort), REPLICA_API_KEY: REPLICA_KEY, REPLICA_API_KEY_HEADER: 'x-vital-api-key' },
  });
  daemon = spawnDaemon(env);
  await daemon.ready;
  await eventually(async () => (await readyz(port)).status === 200, 30_000, 'ready after the first sync');
  expect(await replicaAnswers(replicaPort)).toBe(true);
  expect(await lostGauge(port, 'deleted')).toBe(0);
  return { env, port, replicaPort };
}

describe('a mirror taken away under the running daemon', () => {
  it('deleted: /readyz, /metrics and status say so, no sync starts a new file, the replica stops', async () => {
    const mirrorDb = join(dir, 'deleted', 'mirror.db');
    const { env, port, replicaPort } = await startOn(mirrorDb, 'deleted');
    rmSync(mirrorDb);

    const notReady = await eventually(
      async () => {
        const r = await readyz(port);
        return r.status === 503 ? r : undefined;
      },
      20_000,
      '/readyz 503 once the file is gone',
    );
    expect(notReady.body.checks.mirror).toBe(
      `MIRROR_DB (${mirrorDb}) was deleted under the running daemon: it syncs no more and never starts a new history by itself; ` +
        'restore the mirror (user-mirror restore) or move the file away to start afresh, then restart the daemon',
    );
    expect(await lostGauge(port, 'deleted')).toBe(1);
    expect(await lostGauge(port, 'replaced')).toBe(0);
    // At once, whatever sync job of the old file finishes after the loss was recorded.
    const status = await runCli(['status'], env);
    expect(status.code, status.stdout).toBe(1);
    expect(status.stdout).toContain(`MIRROR_DB (${mirrorDb}) was deleted under the running daemon`);

    // Ticks come every 2 s: a refused sync job, and still no file at MIRROR_DB.
    await daemon?.waitForLog((l) => l.event === 'sync.job_failed' && JSON.stringify(l.err).includes('was deleted'), 20_000);
    expect(existsSync(mirrorDb)).toBe(false);
    expect(daemon?.logs.filter((l) => l.event === 'mirror.lost')).toHaveLength(1);
    await eventually(async () => !(await replicaAnswers(replicaPort)), 10_000, 'the replica stopped');
    expect(await daemon?.stop('SIGTERM')).toEqual({ code: 0, signal: null });
  }, 120_000);

  it('replaced: the same, naming the replacement; a restart adopts the file at MIRROR_DB', async () => {
    const mirrorDb = join(dir, 'replaced', 'mirror.db');
    const { env, port } = await startOn(mirrorDb, 'replaced');
    // An operator's `mv` of a copy over the live file (the copy taken with SQLite's backup, so it is whole).
    const copy = join(dir, 'replaced', 'copy.db');
    const before = await runCli(['status'], env);
    expect(before.code, before.stdout).toBe(0);
    // The race status once lost: a sync job that opened the old file before the replacement, slowed by the
    // service so it finishes (succeeded, checkpointed) after the loss was recorded.
    standIn.faults.set({ latencyMs: 1_500 });
    const from = daemon?.logs.length ?? 0;
    const after = (event: string) => (l: LogLine) => l.event === event && (daemon?.logs.indexOf(l) ?? -1) >= from;
    await daemon?.waitForLog(after('sync.job_started'), 20_000, 'a sync job started against the service slowed');
    const { default: Database } = await import('better-sqlite3');
    const source = new Database(mirrorDb, { readonly: true });
    await source.backup(copy);
    source.close();
    copyFileSync(copy, `${copy}.2`);
    renameSync(`${copy}.2`, mirrorDb);

    const notReady = await eventually(
      async () => {
        const r = await readyz(port);
        return r.status === 503 ? r : undefined;
      },
      20_000,
      '/readyz 503 once the file is replaced',
    );
    expect(notReady.body.checks.mirror).toMatch(/^MIRROR_DB \(.*mirror\.db\) was replaced by another file under the running daemon/);
    expect(await lostGauge(port, 'replaced')).toBe(1);
    // At once: a sync job that opened the old file before the replacement can finish, succeeded, after the loss
    // was recorded (in Redis and beside the mirror); it ran on the old file and clears nothing.
    const status = await runCli(['status'], env);
    expect(status.code, status.stdout).toBe(1);
    expect(status.stdout).toContain('was replaced by another file under the running daemon');
    // That job succeeds and checkpoints the old file after the loss: status still names the loss.
    const finished = await daemon?.waitForLog(after('sync.finished'), 60_000, 'the slowed job of the old file finished');
    expect(finished?.status).toBe('succeeded');
    await daemon?.waitForLog(after('sync.checkpoint'), 20_000, 'the old file checkpointed');
    standIn.faults.set({ latencyMs: 0 });
    const later = await runCli(['status'], env);
    expect(later.code, later.stdout).toBe(1);
    expect(later.stdout).toContain('was replaced by another file under the running daemon');

    // The operator chose the file: a restart adopts it, syncs into it and is ready again.
    expect(await daemon?.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    daemon = spawnDaemon(env);
    await daemon.ready;
    await eventually(async () => (await readyz(port)).status === 200, 30_000, 'ready again after the restart');
    expect(await lostGauge(port, 'replaced')).toBe(0);
    await eventually(async () => (await runCli(['status'], env)).code === 0, 30_000, 'status 0 after a sync into the adopted file');
    expect(await daemon.stop('SIGTERM')).toEqual({ code: 0, signal: null });
  }, 180_000);

  it('a `serve` replica stops serving a mirror deleted under it: 503 naming it on data routes and /readyz', async () => {
    const mirrorDb = join(dir, 'served', 'mirror.db');
    const synced = await runCli(
      ['sync', '--once'],
      {
        SERVICE_BASE_URL: standIn.baseUrl,
        SERVICE_API_KEY: standIn.apiKey,
        SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
        MIRROR_DB: mirrorDb,
      },
      60_000,
    );
    expect(synced.code, synced.stderr).toBe(0);
    const port = await freePort();
    const serve = startCli(['serve'], {
      PATH: process.env.PATH ?? '',
      MIRROR_DB: mirrorDb,
      REPLICA_PORT: String(port),
      REPLICA_API_KEY: REPLICA_KEY,
      REPLICA_API_KEY_HEADER: 'x-vital-api-key',
    });
    try {
      await serve.line(/"event":"replica.listening"/);
      expect(await replicaAnswers(port)).toBe(true);
      rmSync(mirrorDb);
      const refused = await eventually(
        async () => {
          const res = await fetch(`http://127.0.0.1:${port}/v2/user/?limit=1`, { headers: { 'x-vital-api-key': REPLICA_KEY } });
          return res.status === 503 ? ((await res.json()) as { detail: string }) : undefined;
        },
        10_000,
        'the replica refuses once the file is gone',
      );
      expect(refused.detail).toBe(
        `Mirror not ready: MIRROR_DB (${mirrorDb}) was deleted under the running replica: it no longer serves the file it opened; ` +
          'restart user-mirror serve once the mirror is in place',
      );
      expect((await fetch(`http://127.0.0.1:${port}/readyz`)).status).toBe(503);
      expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
    } finally {
      serve.child.kill('SIGTERM');
      expect(await serve.exited()).toBe(0);
    }
  }, 120_000);
});
