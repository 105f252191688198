/**
 * One configuration pass per command (issue "The first hour"): a command
 * given problems found at different steps (a variable's own schema, a check
 * across variables such as the Redis mode, the Cluster hash tag or the
 * replica's key, AUDIT_DB naming the MIRROR_DB file, a key read only when
 * given, MIRROR_GROUP, which the CLI reads before the command) names them
 * all in one run and
 * exits 2, instead of one round of problems per attempt. Real CLI
 * processes; each stops at its configuration, so no Redis or service is needed.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { requireBuiltCli } from './support/cli-process.js';
import { runCli } from './support/daemon-process.js';

/** Valid one by one, wrong together: a single node and a cluster, and a cluster prefix without a hash tag. */
const BAD_REDIS_MODE = { REDIS_URL: 'redis://127.0.0.1:1', REDIS_CLUSTER_NODES: '127.0.0.1:7000', QUEUE_PREFIX: 'no-hash-tag' };
const REDIS_NAMES = ['REDIS_URL', 'REDIS_CLUSTER_NODES', 'QUEUE_PREFIX'];

interface Case {
  command: string;
  args: string[];
  env: Record<string, string>;
  /** Every variable that must be named in the one error. */
  names: string[];
}

const CASES: Case[] = [
  {
    command: 'remove-member',
    args: ['remove-member', 'org-1', 'member-1'],
    // MANAGEMENT_URL missing: the variable's own problem; the Redis ones come from the mode check.
    env: { ...BAD_REDIS_MODE, REMOVAL_ATTEMPTS: '0' },
    names: [...REDIS_NAMES, 'MANAGEMENT_URL', 'REMOVAL_ATTEMPTS'],
  },
  {
    command: 'removals',
    args: ['removals'],
    env: { ...BAD_REDIS_MODE, MANAGEMENT_URL: 'ftp://management.example' },
    names: [...REDIS_NAMES, 'MANAGEMENT_URL'],
  },
  {
    command: 'worker',
    args: ['worker', 'removals'],
    env: { ...BAD_REDIS_MODE, MANAGEMENT_URL: 'http://127.0.0.1:9', LOG_LEVEL: 'loud' },
    names: [...REDIS_NAMES, 'MANAGEMENT_KEY', 'LOG_LEVEL'],
  },
  {
    command: 'serve (the replica key check)',
    args: ['serve'],
    // The key check runs across variables; REPLICA_WORKERS fails its own schema.
    env: { REPLICA_API_KEY: 'same-key', SERVICE_API_KEY: 'same-key', REPLICA_WORKERS: '0' },
    names: ['REPLICA_API_KEY', 'REPLICA_WORKERS'],
  },
  {
    command: 'serve (the service key, read only when given)',
    args: ['serve'],
    env: { SERVICE_API_KEY: 'a key with spaces', REPLICA_PORT: 'eighty' },
    names: ['SERVICE_API_KEY', 'REPLICA_PORT'],
  },
  {
    command: 'sync (a MIRROR_GROUP that is no group here, read before the command)',
    args: ['sync', '--once'],
    env: { MIRROR_GROUP: 'no-such-group-xyz', SYNC_CONCURRENCY: '0', MIRROR_DB: '/nonexistent/never-created/mirror.db' },
    names: ['MIRROR_GROUP', 'SYNC_CONCURRENCY', 'SERVICE_BASE_URL'],
  },
  {
    command: 'daemon (a MIRROR_GROUP that is not a group name)',
    args: ['daemon'],
    env: { MIRROR_GROUP: 'not a group!', SYNC_CRON: 'now and then', SERVICE_BASE_URL: 'http://127.0.0.1:9', SERVICE_API_KEY: 'k' },
    names: ['MIRROR_GROUP', 'SYNC_CRON'],
  },
  {
    command: 'daemon (AUDIT_DB naming the MIRROR_DB file)',
    args: ['daemon'],
    env: { MIRROR_DB: '/tmp/one-pass/mirror.db', AUDIT_DB: '/tmp/one-pass/../one-pass/mirror.db', LOG_LEVEL: 'loud' },
    names: ['AUDIT_DB', 'LOG_LEVEL', 'SERVICE_BASE_URL'],
  },
  {
    command: 'worker (AUDIT_DB naming the MIRROR_DB file)',
    args: ['worker', 'removals'],
    env: { MIRROR_DB: 'data/mirror.db', AUDIT_DB: './data/mirror.db', REMOVAL_CONCURRENCY: '0' },
    names: ['AUDIT_DB', 'REMOVAL_CONCURRENCY', 'MANAGEMENT_URL'],
  },
  {
    command: 'stand-in',
    args: ['stand-in', '--port', '0'],
    env: { SERVICE_API_KEY_HEADER: 'not a header', MANAGEMENT_KEY: 'a key with spaces' },
    names: ['SERVICE_API_KEY_HEADER', 'MANAGEMENT_KEY'],
  },
];

beforeAll(() => {
  requireBuiltCli('src/commands/remove-member.js', 'src/commands/removals.js', 'src/commands/worker.js', 'src/commands/serve.js');
});

describe('a command with several configuration problems', () => {
  it.each(CASES)('$command names every one in one error and exits 2', async ({ args, env, names }) => {
    const run = await runCli(args, env);
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr.match(/invalid configuration/g), run.stderr).toHaveLength(1);
    const problems = run.stderr.split('\n').filter((line) => line.startsWith('  - '));
    for (const name of names)
      expect(
        problems.some((p) => p.includes(name)),
        `${name} in:\n${run.stderr}`,
      ).toBe(true);
  });
});
