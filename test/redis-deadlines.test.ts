/**
 * Every command that touches Redis answers, naming the cause, when Redis
 * cannot be used (issue 50, broken case 6: `removals` and `webhooks` never
 * returned). Against real parts: a redis-server of the test's own with
 * `requirepass` (no password: NOAUTH; a wrong one: WRONGPASS), a port where
 * nothing listens, and a redis-server stopped with SIGSTOP (the kernel still
 * takes the connection; nothing answers). The short commands exit 1 with
 * the cause on stderr; the long-running ones (`worker removals`, `daemon`)
 * keep waiting, by design, but log why at once, and stop on SIGTERM.
 *
 * No fixed short deadline: each command must return at all (the busy-machine
 * floor bounds the wait); the time it took is printed for the record.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireBuiltCli, runCli, startCli } from './support/cli-process.js';
import { freePort } from './support/redis-server.js';
import { durableNodeArgs, launchRedis, redisCli, stopAll, type RedisProcess } from './support/redis-process.js';

const PASSWORD = 'deadline-test-4e7a';
const ORG = '11111111-1111-4111-8111-111111111111';
const MEMBER = '22222222-2222-4222-8222-222222222222';

let guarded: RedisProcess;
let stopped: RedisProcess;
let deadPort: number;
let dir: string;

beforeAll(async () => {
  requireBuiltCli();
  dir = mkdtempSync(join(tmpdir(), 'redis-deadlines-'));
  guarded = await launchRedis('requirepass', durableNodeArgs);
  await redisCli(guarded.port, ['config', 'set', 'requirepass', PASSWORD]);
  stopped = await launchRedis('stopped', durableNodeArgs);
  stopped.child.kill('SIGSTOP');
  deadPort = await freePort();
});

afterAll(async () => {
  stopped?.child.kill('SIGCONT');
  await stopAll([guarded, stopped].filter((p) => p !== undefined));
  if (dir) rmSync(dir, { recursive: true, force: true });
});

interface Case {
  name: string;
  env: () => Record<string, string>;
  /** What stderr must say: the cause, in words an operator acts on. */
  said: RegExp;
  failure: string;
}

/** A REDIS_URL with a password goes in a file (the CLI refuses one by value). */
function urlFile(url: string): string {
  const path = join(dir, `url-${Math.random().toString(36).slice(2)}`);
  writeFileSync(path, `${url}\n`, { mode: 0o600 });
  return path;
}

const CASES: Case[] = [
  {
    name: 'requirepass, no password (NOAUTH)',
    env: () => ({ REDIS_URL: `redis://127.0.0.1:${guarded.port}` }),
    said: /Redis refused the connection: NOAUTH/,
    failure: 'refused',
  },
  {
    name: 'requirepass, a wrong password (WRONGPASS)',
    env: () => ({ REDIS_URL_FILE: urlFile(`redis://:not-${PASSWORD}@127.0.0.1:${guarded.port}`) }),
    said: /Redis refused the connection: WRONGPASS/,
    failure: 'refused',
  },
  {
    name: 'nothing listening',
    env: () => ({ REDIS_URL: `redis://127.0.0.1:${deadPort}` }),
    said: /Redis is unreachable: .*ECONNREFUSED/,
    failure: 'unreachable',
  },
  {
    name: 'a server that takes the connection and never answers (SIGSTOP)',
    env: () => ({ REDIS_URL: `redis://127.0.0.1:${stopped.port}` }),
    said: /Redis timed out: no answer within \d+ ms/,
    failure: 'timed out',
  },
];

/** Every verb shares one mechanism (jobs/command-redis.ts): a reader, a writer and a blocking waiter of each command. */
const COMMANDS: string[][] = [
  ['removals'],
  ['removals', 'retry', '--all'],
  ['webhooks', '--failed', '--json'],
  ['webhooks', 'retry', '--all'],
  ['remove-member', ORG, MEMBER, '--wait'],
];

function commandEnv(c: Case): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    MANAGEMENT_URL: 'http://127.0.0.1:9/',
    WEBHOOK_URL: 'http://127.0.0.1:9/hook',
    MIRROR_ID: 'deadlines',
    MIRROR_DB: join(dir, 'mirror.db'),
    ...c.env(),
  };
}

describe.each(CASES)('Redis $name', (c) => {
  it('removals, webhooks and remove-member exit 1 naming the cause', async () => {
    // Side by side: each mostly waits on its deadline.
    const runs = await Promise.all(
      COMMANDS.map(async (args) => {
        const started = Date.now();
        const run = await runCli(args, commandEnv(c));
        console.log(`[${c.failure}] user-mirror ${args.join(' ')}: exit ${run.code} after ${Date.now() - started} ms`);
        return { args, ...run };
      }),
    );
    for (const run of runs) {
      const what = `${run.args.join(' ')}: ${run.stderr}`;
      expect(run.code, what).toBe(1);
      expect(run.stderr, what).toMatch(c.said);
      // Where, never the password.
      expect(run.stderr, what).toMatch(/\(redis:\/\/127\.0\.0\.1:\d+\)/);
      expect(run.stderr, what).not.toContain(PASSWORD);
      expect(run.stdout, what).not.toMatch(/queued removal/);
    }
  });

  it('status exits 1 and names the cause', async () => {
    const run = await runCli(['status'], commandEnv(c));
    expect(run.code, run.stderr).toBe(1);
    expect(run.stdout).toMatch(/queues: redis unreachable \((NOAUTH|WRONGPASS|connect ECONNREFUSED|Redis timed out)/);
  });

  it('worker removals keeps waiting, logs why at once, and stops on SIGTERM', async () => {
    const worker = startCli(['worker', 'removals'], {
      ...commandEnv(c),
      MANAGEMENT_KEY_FILE: urlFile('management-key-for-the-test'),
      ALLOW_VOLATILE_REDIS: '1',
    });
    try {
      const line = await worker.line(/"event":"redis.waiting"/);
      const logged = JSON.parse(line) as { failure: string; msg: string; err: unknown };
      expect(logged.failure).toBe(c.failure);
      expect(JSON.stringify(logged.err)).toMatch(c.said);
      expect(worker.child.exitCode).toBeNull();
      worker.child.kill('SIGTERM');
      expect(await worker.exited()).toBe(0);
    } finally {
      worker.child.kill('SIGKILL');
    }
  });
});
