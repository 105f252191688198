/**
 * `user-mirror demo`, the README's first command: the whole tour runs, and
 * its removal queue lives in a Redis of its own (a private redis-server,
 * gone afterwards) or in the one REDIS_URL names (said so, and its queue
 * removed afterwards); never in a Redis nobody gave it. Real processes.
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from './support/daemon-process.js';
import { tempDir, type TempDir } from './support/mirror-fixtures.js';
import { redisKeys, startTestRedis, type TestRedis } from './support/redis-server.js';

let dir: TempDir;
let redis: TestRedis;
beforeAll(async () => {
  dir = tempDir('user-mirror-demo-');
  redis = await startTestRedis();
});
afterAll(async () => {
  await redis?.stop();
  dir?.remove();
});

describe('demo', () => {
  it('without REDIS_URL: a private redis-server for the removal, durable, gone afterwards', async () => {
    const run = await runCli(['demo', '--users', '2000'], { MIRROR_DB: dir.file('own.db') }, 180_000);
    expect(run.code, run.stderr).toBe(0);
    const said = /Started a private redis-server for the removal queue at redis:\/\/127\.0\.0\.1:(\d+)/.exec(run.stdout);
    expect(said, run.stdout).not.toBeNull();
    expect(run.stdout).toMatch(/removal queue +durable/);
    expect(run.stdout).not.toContain('ALLOW_VOLATILE_REDIS');
    // The removal was performed; nothing of the server is left.
    expect(run.stdout).toMatch(/succeeded/);
    const left = await redisKeys(`redis://127.0.0.1:${said?.[1] ?? '0'}`).catch(() => 'gone');
    expect(left).toBe('gone');
  });

  it('with REDIS_URL: says which Redis it writes to, and removes its queue afterwards', async () => {
    const run = await runCli(['demo', '--users', '2000'], { MIRROR_DB: dir.file('given.db'), REDIS_URL: redis.url }, 180_000);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain(`Using the Redis at REDIS_URL (redis://127.0.0.1:${redis.port})`);
    expect(run.stdout).toMatch(/succeeded/);
    expect((await redisKeys(redis.url)).filter((k) => k.startsWith('user-mirror-demo:'))).toEqual([]);
    expect(existsSync(dir.file('given.db'))).toBe(true);
  });
});
