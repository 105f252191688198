/**
 * A look never writes: the read-only commands (`status`, `webhooks`,
 * `removals` and their `--failed` listings) leave a fresh Redis exactly as
 * they found it — no BullMQ meta key, no queue left behind in a Redis that
 * only an operator's question touched. Real commands against a redis-server
 * of the test's own, with a synced mirror, removals and webhooks configured.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { runCli } from './support/daemon-process.js';
import { tempDir, type TempDir } from './support/mirror-fixtures.js';
import { redisKeys, startTestRedis, type TestRedis } from './support/redis-server.js';

let redis: TestRedis;
let standIn: StandIn;
let dir: TempDir;
let env: Record<string, string>;

beforeAll(async () => {
  [redis, standIn] = await Promise.all([startTestRedis(), startStandIn({ port: 0, users: 50, seed: 5 })]);
  dir = tempDir('user-mirror-read-only-');
  env = {
    REDIS_URL: redis.url,
    MIRROR_DB: dir.file('mirror.db'),
    MIRROR_ID: 'look',
    MANAGEMENT_URL: standIn.managementUrl,
    WEBHOOK_URL: 'http://127.0.0.1:9/hooks',
  };
  const sync = await runCli(
    ['sync', '--once'],
    { ...env, SERVICE_BASE_URL: standIn.baseUrl, SERVICE_API_KEY: standIn.apiKey, SERVICE_API_KEY_HEADER: standIn.apiKeyHeader },
    60_000,
  );
  expect(sync.code, sync.stderr).toBe(0);
});
afterAll(async () => {
  await Promise.all([redis?.stop(), standIn?.close()]);
  dir?.remove();
});

describe('read-only commands', () => {
  it.each([
    [['status'], /^queues\n {2}sync +waiting 0/m],
    [['status', '--json'], /"reachable": true/],
    [['webhooks'], /./],
    [['webhooks', '--failed'], /./],
    [['removals'], /./],
    [['removals', '--failed'], /./],
  ])('%j leaves a fresh Redis empty', async (args, shows) => {
    const run = await runCli(args, env, 30_000);
    // It did reach this Redis (no "unreachable"), and answered.
    expect(run.stdout + run.stderr).not.toMatch(/unreachable/);
    expect(run.stdout).toMatch(shows);
    expect(await redisKeys(redis.url)).toEqual([]);
  });
});
