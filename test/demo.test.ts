/**
 * `user-mirror demo`, the README's first command: the whole tour runs, and
 * its removal queue lives in a Redis of its own (a private redis-server,
 * gone afterwards) or in the one REDIS_URL names (said so, and its queue
 * removed afterwards); never in a Redis nobody gave it. Real processes.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, symlinkSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, runCli } from './support/daemon-process.js';
import { runCli as runCliIn } from './support/cli-process.js';
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
  it('without REDIS_URL: starts a private, durable redis-server for the removal and leaves none behind', async () => {
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

  it("README.md: its own data/demo.db, fresh on every run (a smaller rerun is not partial); the README's next commands read it", async () => {
    // A project folder where `npx user-mirror` is this checkout, as after `npm ci` in a clone.
    const cwd = dir.file('project');
    mkdirSync(join(cwd, 'node_modules', '.bin'), { recursive: true });
    symlinkSync(ROOT, join(cwd, 'node_modules', 'user-mirror'));
    symlinkSync('../user-mirror/dist/cli.js', join(cwd, 'node_modules', '.bin', 'user-mirror'));
    const env = { PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ''}`, ENV_FILE: '/dev/null' };
    const first = await runCliIn(['demo', '--users', '3000'], env, 240_000, { cwd });
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toContain("Mirror: ./data/demo.db, the demo's own, started fresh");
    const second = await runCliIn(['demo', '--users', '500'], env, 240_000, { cwd });
    expect(second.code, second.stdout + second.stderr).toBe(0);
    expect(second.stdout).not.toContain('PARTIAL');
    expect(second.stdout).toContain("The demo's mirror is ./data/demo.db");
    // The README's block after the demo, as written.
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const block = /```sh\n(export MIRROR_DB=data\/demo\.db[\s\S]*?)```/.exec(readme)?.[1] ?? '';
    const run = spawnSync('bash', ['-e', '-o', 'pipefail', '-c', block], { cwd, env, encoding: 'utf8', timeout: 120_000 });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toContain('500');
    expect(run.stdout).toMatch(/"found":true/);
  });

  it('a MIRROR_DB it was given is reused, said so; a partial sync ends loudly with exit 4', async () => {
    const given = { MIRROR_DB: dir.file('reused.db') };
    expect((await runCli(['demo', '--users', '3000'], given, 240_000)).code).toBe(0);
    const again = await runCli(['demo', '--users', '300'], given, 240_000);
    expect(again.stdout).toContain(`Mirror: ${given.MIRROR_DB} (MIRROR_DB): the demo syncs into what it holds.`);
    expect(again.stdout).toContain('THE SYNC ENDED PARTIAL');
    expect(again.code).toBe(4);
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
