/**
 * The producers in docs/removals.md, taken from the page as written. The
 * TypeScript one runs as is (Node strips its types; it imports the package
 * by name) against a redis-server of the test's own, and its job is in the
 * queue the workers read. The Python one compiles with the machine's
 * python3, and its `removal_target` names the same queue as `user-mirror
 * removals target` for every shape of MANAGEMENT_URL. Not run here: its
 * `main`, which needs BullMQ for Python (`pip install bullmq`), a package
 * this machine cannot install (its registries are npm and Debian's); the
 * payload and options it sends are the ones jobs/REMOVAL-QUEUE.md specifies,
 * which test/removal-*.test.ts enqueue as raw jobs.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli } from './support/daemon-process.js';
import { ROOT, tempDir } from './support/mirror-fixtures.js';
import { redisKeys, startTestRedis } from './support/redis-server.js';

const dir = tempDir('user-mirror-python-');
afterAll(() => dir.remove());

const DOC = readFileSync(join(ROOT, 'docs/removals.md'), 'utf8');
const blocksOf = (lang: string) => [...DOC.matchAll(new RegExp('```' + lang + '\\n([\\s\\S]*?)```', 'g'))].map((m) => m[1] ?? '');
const blocks = blocksOf('python');

describe('the TypeScript producer in docs/removals.md', () => {
  it('runs as written and leaves one job in the target queue', async () => {
    const [block] = blocksOf('ts');
    expect(block).toMatch(/from 'user-mirror\/producer'/);
    const redis = await startTestRedis();
    // Inside the package, so that `user-mirror/producer` resolves to this checkout's build.
    const here = mkdtempSync(join(ROOT, 'test', '.recipe-'));
    try {
      writeFileSync(join(here, 'producer.mts'), block ?? '');
      const managementUrl = 'https://management.example.com';
      execFileSync(process.execPath, [join(here, 'producer.mts')], {
        env: { PATH: process.env.PATH ?? '', REDIS_URL: redis.url, MANAGEMENT_URL: managementUrl },
        stdio: 'pipe',
        timeout: 30_000,
      });
      const target = (
        JSON.parse((await runCli(['removals', 'target', '--json'], { MANAGEMENT_URL: managementUrl })).stdout) as { target: string }
      ).target;
      const waiting = (await redisKeys(redis.url)).filter((k) => k === `user-mirror:member-removals-${target}:wait`);
      expect(waiting).toHaveLength(1);
    } finally {
      rmSync(here, { recursive: true, force: true });
      await redis.stop();
    }
  });
});
const program = dir.file('enqueue_removal.py');
writeFileSync(program, blocks[0] ?? '');

describe('the Python producer in docs/removals.md', () => {
  it('is one complete program that compiles', () => {
    expect(blocks).toHaveLength(1);
    expect(blocks[0]).toMatch(/^import asyncio$/m);
    expect(blocks[0]).toMatch(/^if __name__ == "__main__":$/m);
    execFileSync('python3', ['-m', 'py_compile', program], { stdio: 'pipe' });
  });

  it.each([
    'https://api.example.com',
    'https://Api.Example.com:443/mgmt/',
    'http://127.0.0.1:8787',
    'https://user:pw@management.example.com/v1/',
    'http://host.example:8080/base/path',
  ])('names the queue the CLI names for %s', async (url) => {
    const python = execFileSync(
      'python3',
      ['-c', 'import runpy, sys; print(runpy.run_path(sys.argv[1])["removal_target"](sys.argv[2]))', program, url],
      { encoding: 'utf8' },
    ).trim();
    const cli = await runCli(['removals', 'target', '--json'], { MANAGEMENT_URL: url });
    expect(cli.code, cli.stderr).toBe(0);
    expect(python).toBe((JSON.parse(cli.stdout) as { target: string }).target);
  });
});
