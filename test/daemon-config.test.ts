/**
 * The daemon's configuration in one pass, and a daemon without removals.
 *
 * Pure: readDaemonConfig reports every problem of an environment at once
 * (the registry's, the management pair's, the webhook's secret, the
 * replica's key, the Redis mode), and accepts an environment without
 * MANAGEMENT_*. Processes, as pm2 runs them (their own redis-server, the
 * stand-in over HTTP): a daemon without MANAGEMENT_* syncs, is ready and
 * `status` exits 0; with WEBHOOK_URL it delivers signed events too; a daemon
 * with several problems names them all and exits 2; `webhooks new-secret`
 * prints a secret the registry accepts.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { managementOf, readDaemonConfig } from '../src/daemon/daemon-config.js';
import { readConfig } from '../src/runtime/config.js';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { problemsOf } from './support/config-problems.js';
import { daemonEnv, getStatus, runCli, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';
import { freePort, startTestRedis, type TestRedis } from './support/redis-server.js';
import { SECRET, startReceiver, type Receiver } from './support/webhook-rig.js';
import { eventually } from './support/eventually.js';

const NEW_SECRET = /^whsec_[A-Za-z0-9+/]{43}=\n$/;

/** A complete daemon environment without the management pair. */
const SYNC_ONLY: Record<string, string> = {
  SERVICE_BASE_URL: 'http://127.0.0.1:9/',
  SERVICE_API_KEY: 'team-key',
  MIRROR_DB: '/tmp/never-opened.db',
};

const quiet = () => undefined;
const read = (env: Record<string, string>) => readDaemonConfig(env, quiet);
const namesOf = (problems: readonly string[]) => problems.map((p) => p.split(':')[0]);

describe('readDaemonConfig', () => {
  it('accepts a daemon without MANAGEMENT_URL and MANAGEMENT_KEY: removals off', () => {
    const config = read(SYNC_ONLY);
    expect(config.MANAGEMENT_URL).toBeUndefined();
    expect(managementOf(config)).toBeUndefined();
    const both = read({ ...SYNC_ONLY, MANAGEMENT_URL: 'https://mgmt.example/', MANAGEMENT_KEY: 'mk' });
    expect(managementOf(both)).toEqual({ MANAGEMENT_URL: 'https://mgmt.example', MANAGEMENT_KEY: 'mk' });
  });

  it('refuses half of the management pair, naming the missing half (a key given as a file counts as given)', () => {
    expect(problemsOf(() => read({ ...SYNC_ONLY, MANAGEMENT_URL: 'https://mgmt.example' }))).toEqual([
      'MANAGEMENT_KEY: is required when MANAGEMENT_URL is set (removals need both; unset both to run without removals)',
    ]);
    const dir = mkdtempSync(join(tmpdir(), 'daemon-config-'));
    try {
      const keyFile = join(dir, 'management-key');
      writeFileSync(keyFile, 'mk\n', { mode: 0o600 });
      expect(namesOf(problemsOf(() => read({ ...SYNC_ONLY, MANAGEMENT_KEY_FILE: keyFile })))).toEqual(['MANAGEMENT_URL']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('reports every problem in one error: variables, the pair, the webhook secret, the replica key, the Redis mode', () => {
    const problems = problemsOf(() =>
      read({
        SERVICE_BASE_URL: 'ftp://nope',
        MANAGEMENT_URL: 'https://mgmt.example',
        SYNC_CRON: 'every minute',
        WEBHOOK_URL: 'https://hooks.example/in',
        REPLICA_PORT: '8788',
        REDIS_CLUSTER_NODES: '10.0.0.1:7000',
      }),
    );
    expect(namesOf(problems).sort()).toEqual(
      ['MANAGEMENT_KEY', 'QUEUE_PREFIX', 'REPLICA_API_KEY', 'SERVICE_API_KEY', 'SERVICE_BASE_URL', 'SYNC_CRON', 'WEBHOOK_SECRET'].sort(),
    );
    expect(problems.find((p) => p.startsWith('WEBHOOK_SECRET'))).toContain('user-mirror webhooks new-secret');
  });

  it('names a bad secret once, for what it is, not also as missing', () => {
    const problems = problemsOf(() => read({ ...SYNC_ONLY, WEBHOOK_URL: 'https://hooks.example/in', WEBHOOK_SECRET: 'plain' }));
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(/^WEBHOOK_SECRET: must be whsec_/);
  });
});

describe('user-mirror webhooks new-secret', () => {
  it('prints whsec_ and base64 of 32 random bytes, nothing else, with no configuration at all', async () => {
    const [a, b] = await Promise.all([runCli(['webhooks', 'new-secret'], {}), runCli(['webhooks', 'new-secret'], {})]);
    for (const run of [a, b]) {
      expect(run.code).toBe(0);
      expect(run.stderr).toBe('');
      expect(run.stdout).toMatch(NEW_SECRET);
    }
    expect(a.stdout).not.toBe(b.stdout);
    const secret = a.stdout.trimEnd();
    expect(Buffer.from(secret.slice('whsec_'.length), 'base64')).toHaveLength(32);
    expect(readConfig(['WEBHOOK_SECRET'], { WEBHOOK_SECRET: secret }).WEBHOOK_SECRET).toBe(secret);
  });

  it('takes no options (its stdout is the secret alone)', async () => {
    const run = await runCli(['webhooks', 'new-secret', '--json'], {});
    expect(run.code).toBe(2);
    expect(run.stdout).toBe('');
  });
});

describe('the daemon as a process', () => {
  let redis: TestRedis;
  let standIn: StandIn;
  let receiver: Receiver;
  let dir: string;
  let daemon: DaemonProcess | undefined;

  beforeAll(async () => {
    redis = await startTestRedis();
    standIn = await startStandIn({ port: 0, users: 300, seed: 41 });
    receiver = await startReceiver();
    dir = mkdtempSync(join(tmpdir(), 'daemon-config-'));
  });

  afterAll(async () => {
    await daemon?.stop('SIGKILL').catch(() => undefined);
    await receiver?.close();
    await standIn?.close();
    await redis?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** The test daemon's environment without MANAGEMENT_URL and MANAGEMENT_KEY. */
  const withoutManagement = async (name: string, extra: Record<string, string> = {}) => {
    const statusPort = await freePort();
    const env = daemonEnv({
      redisUrl: redis.url,
      standIn,
      mirrorDb: join(dir, `${name}.db`),
      queuePrefix: `t${Date.now()}${name}`,
      mirrorId: name,
      statusPort,
      cron: '0 0 1 1 *',
    });
    delete env.MANAGEMENT_URL;
    delete env.MANAGEMENT_KEY;
    return { env: { ...env, ...extra }, statusPort };
  };

  it('without MANAGEMENT_*: says removals are off, syncs, is ready, and status exits 0', async () => {
    const { env, statusPort } = await withoutManagement('synconly');
    daemon = spawnDaemon(env);
    const off = await daemon.waitForLog((l) => l.event === 'daemon.removals_off', 20_000, 'daemon.removals_off');
    expect(off.level).toBe(30);
    expect(off.msg).toContain('MANAGEMENT_URL is unset');
    await daemon.ready;
    const ready = await eventually(
      async () => {
        const r = await getStatus(statusPort, '/readyz');
        return r.status === 200 ? r : undefined;
      },
      30_000,
      '/readyz 200 after the first sync',
    );
    expect(JSON.parse(ready.body)).toEqual({
      ready: true,
      checks: { phase: 'ok', db: 'ok', mirror: 'ok', redis: 'ok', removals: 'off: MANAGEMENT_URL is unset' },
    });
    expect(daemon.logs.find((l) => l.event === 'daemon.starting')).toMatchObject({ removalTarget: null, managementUrl: null });
    // The mirror is ready once the run is published; BullMQ marks its job completed a moment later.
    const metrics = await eventually(
      async () => {
        const m = await getStatus(statusPort, '/metrics');
        return /^user_mirror_queue_jobs\{queue="sync",state="completed"\} [1-9]\d*$/m.test(m.body) ? m : undefined;
      },
      15_000,
      'the completed sync job in /metrics',
    );
    expect(metrics.body).not.toMatch(/queue="removals"/);

    const status = await runCli(['status', '--json'], env);
    expect(status.code, status.stdout + status.stderr).toBe(0);
    const report = JSON.parse(status.stdout) as { removalsConfigured: boolean; mirror: { activeUsers: number } };
    expect(report.removalsConfigured).toBe(false);
    expect(report.mirror.activeUsers).toBe(300);

    expect((await daemon.stop('SIGTERM')).code).toBe(0);
    daemon = undefined;
  });

  it('without MANAGEMENT_*, with WEBHOOK_URL: delivers signed events', async () => {
    const { env } = await withoutManagement('hooks', { WEBHOOK_URL: receiver.url, WEBHOOK_SECRET: SECRET });
    daemon = spawnDaemon(env);
    await daemon.ready;
    await eventually(() => receiver.delivered().length > 0, 30_000, 'a delivered webhook');
    expect(receiver.requests.every((r) => r.verified)).toBe(true);
    expect((await daemon.stop('SIGTERM')).code).toBe(0);
    daemon = undefined;
  });

  it('with several problems: names them all in one run and exits 2, before anything starts', async () => {
    const { env, statusPort } = await withoutManagement('broken', {
      MANAGEMENT_URL: 'https://mgmt.example',
      WEBHOOK_URL: receiver.url,
      SYNC_CRON: 'now and then',
    });
    const run = await runCli(['daemon'], env);
    expect(run.code).toBe(2);
    for (const name of ['MANAGEMENT_KEY', 'WEBHOOK_SECRET', 'SYNC_CRON']) expect(run.stderr).toContain(`  - ${name}: `);
    expect(run.stderr).toContain('user-mirror webhooks new-secret');
    expect(run.stdout).toBe('');
    await expect(getStatus(statusPort, '/healthz')).rejects.toThrow();
  });
});
