/**
 * Redaction built from the configuration, through real processes at
 * LOG_LEVEL=trace: every secret the configuration holds (the service key in
 * the live service's header name, the management key, the replica's key in
 * a header of its own, the webhook secret, a Redis password in REDIS_URL, a
 * password in the webhook URL's user info and query) is pushed through
 * every logging path (a key the replica refuses, a Redis that cannot be
 * reached with a password, a Redis that asks for one, webhook deliveries
 * that fail) and none appears in any output: log lines, stderr, `status`.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { daemonEnv, keysAsFiles, runCli, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';
import { freePort } from './support/redis-server.js';
import { durableNodeArgs, launchRedis, stopAll, type RedisProcess } from './support/redis-process.js';
import { startReceiver, type Receiver } from './support/webhook-rig.js';
import { eventually } from './support/eventually.js';

const REDIS_PASSWORD = `redispw-${randomBytes(6).toString('hex')}`;
const HOOK_PASSWORD = `hookpw-${randomBytes(6).toString('hex')}`;
const QUERY_PASSWORD = `querypw-${randomBytes(6).toString('hex')}`;
const WEBHOOK_KEY = randomBytes(24).toString('base64');
const WEBHOOK_SECRET = `whsec_${WEBHOOK_KEY}`;
const REPLICA_KEY = `rk_${randomBytes(16).toString('hex')}`;
const WRONG_KEY = `rk_${randomBytes(16).toString('hex')}`;

let redis: RedisProcess;
let standIn: StandIn;
let receiver: Receiver;
let dir: string;
const daemons: DaemonProcess[] = [];

beforeAll(async () => {
  redis = await launchRedis('redaction', durableNodeArgs);
  const admin = new Redis({ host: '127.0.0.1', port: redis.port });
  await admin.config('SET', 'requirepass', REDIS_PASSWORD);
  admin.disconnect();
  standIn = await startStandIn({ port: 0, users: 40, seed: 3, apiKeyHeader: 'x-vital-api-key' });
  receiver = await startReceiver();
  receiver.answer = () => ({ status: 500 });
  dir = mkdtempSync(join(tmpdir(), 'redaction-'));
});

afterAll(async () => {
  for (const d of daemons) await d.stop('SIGKILL').catch(() => undefined);
  await receiver?.close();
  await standIn?.close();
  if (redis !== undefined) await stopAll([redis]);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function traceEnv(name: string, redisUrl: string, replicaPort: number): Promise<Record<string, string>> {
  const hook = new URL(receiver.url);
  hook.username = 'hooks';
  hook.password = HOOK_PASSWORD;
  hook.searchParams.set('password', QUERY_PASSWORD);
  // A REDIS_URL with a password is taken from a file only (given by value it is refused): the daemon still holds it.
  const env = daemonEnv({
    redisUrl,
    standIn,
    mirrorDb: join(dir, `${name}.db`),
    queuePrefix: name,
    mirrorId: name,
    statusPort: await freePort(),
    cron: '*/3 * * * * *',
    extra: {
      LOG_LEVEL: 'trace',
      CHANGES_BASELINE: 'events',
      WEBHOOK_URL: hook.toString(),
      WEBHOOK_SECRET,
      WEBHOOK_TIMEOUT_MS: '2000',
      REPLICA_PORT: String(replicaPort),
      REPLICA_API_KEY: REPLICA_KEY,
      REPLICA_API_KEY_HEADER: 'x-replica-key',
    },
  });
  return keysAsFiles(env, join(dir, `keys-${name}`));
}

/** Every secret of the test, by name, and the outputs that must hold none of them. */
function leaks(outputs: string[]): string[] {
  const secrets: Record<string, string> = {
    SERVICE_API_KEY: standIn.apiKey,
    MANAGEMENT_KEY: standIn.managementKey,
    REPLICA_API_KEY: REPLICA_KEY,
    'the refused key': WRONG_KEY,
    WEBHOOK_SECRET,
    "WEBHOOK_SECRET's key": WEBHOOK_KEY,
    'REDIS_URL password': REDIS_PASSWORD,
    'WEBHOOK_URL user-info password': HOOK_PASSWORD,
    'WEBHOOK_URL password= query': QUERY_PASSWORD,
  };
  const all = outputs.join('\n');
  return Object.entries(secrets)
    .filter(([, value]) => all.includes(value))
    .map(([name]) => name);
}

describe('no secret in any output at LOG_LEVEL=trace', () => {
  it('through a refused replica key, a Redis with a password (reachable and not), failing webhooks, and status', async () => {
    const outputs: string[] = [];
    const replicaPort = await freePort();
    const env = await traceEnv('live', `redis://:${REDIS_PASSWORD}@127.0.0.1:${redis.port}`, replicaPort);
    const daemon = spawnDaemon(env);
    daemons.push(daemon);
    await daemon.ready;
    await daemon.waitForLog((l) => l.event === 'sync.finished' && l.status === 'succeeded', 60_000, 'a sync');
    await daemon.waitForLog(
      (l) => typeof l.event === 'string' && /^webhook\.(retry|failed|endpoint_failing)$/.test(l.event),
      60_000,
      'a webhook failure',
    );

    // The replica: a refused key, then the right one, in the configured header.
    const url = `http://127.0.0.1:${replicaPort}/v2/user/?limit=5`;
    const refused = await eventually(
      async () => {
        const res = await fetch(url, { headers: { 'x-replica-key': WRONG_KEY } });
        return res.status === 401 || res.status === 403 ? res.status : undefined;
      },
      30_000,
      'the replica refusing a wrong key',
    );
    expect([401, 403]).toContain(refused);
    expect((await fetch(url, { headers: { 'x-replica-key': REPLICA_KEY } })).status).toBe(200);

    const status = await runCli(['status'], env, 60_000);
    outputs.push(status.stdout, status.stderr);
    expect(await daemon.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    outputs.push(JSON.stringify(daemon.logs), daemon.text());

    // A Redis that cannot be reached, with the password in its URL: the daemon waits and says so, status reports it.
    const deadPort = await freePort();
    const downEnv = await traceEnv('down', `redis://:${REDIS_PASSWORD}@127.0.0.1:${deadPort}`, await freePort());
    const waiting = spawnDaemon(downEnv);
    daemons.push(waiting);
    await waiting.waitForLog((l) => l.event === 'redis.waiting', 30_000, 'the daemon waiting for Redis');
    const down = await runCli(['status'], downEnv, 60_000);
    expect(down.code).toBe(1);
    outputs.push(down.stdout, down.stderr);
    await waiting.stop('SIGTERM');
    outputs.push(JSON.stringify(waiting.logs), waiting.text());

    // The paths ran (the webhook failure and the sync were waited for above): the Redis outage.
    const all = outputs.join('\n');
    expect(all).toMatch(/redis unreachable/);
    expect(leaks(outputs)).toEqual([]);
  }, 240_000);
});
