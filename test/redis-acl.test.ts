/**
 * Redis as a least-privilege client: the `user` line that docs/removals.md
 * ("A least-privilege Redis user") documents is given, as written, to a
 * redis-server of the test's own, and the daemon runs as that user: a sync
 * per schedule, webhooks to a real receiver, a removal through
 * `remove-member --wait`, then `status`, `removals` and `webhooks` with their
 * retry and adopt forms. Every command refused by the ACL lands in
 * `ACL LOG`, which must stay empty; the user is also shown to be refused
 * what it must not have (other keys, FLUSHALL, CONFIG SET, pub/sub).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { ROOT, daemonEnv, keysAsFiles, runCli, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';
import { freePort } from './support/redis-server.js';
import { durableNodeArgs, launchRedis, stopAll, type RedisProcess } from './support/redis-process.js';
import { SECRET, startReceiver, type Receiver } from './support/webhook-rig.js';
import { eventually } from './support/eventually.js';

const PASSWORD = 'acl-test-9f3c1d';
let redis: RedisProcess;
let admin: Redis;
let standIn: StandIn;
let receiver: Receiver;
let dir: string;
let daemon: DaemonProcess | undefined;

/** The documented `user user-mirror …` line, split into its rules (name and `on` first). */
function documentedRules(): string[] {
  const doc = readFileSync(join(ROOT, 'docs', 'removals.md'), 'utf8');
  const line = doc.split('\n').find((l) => l.startsWith('user user-mirror '));
  if (line === undefined) throw new Error('docs/removals.md has no `user user-mirror …` ACL line');
  return line.trim().split(/\s+/).slice(1);
}

/** The documented rules for user `name` with `prefix` and the test's password. */
function rulesFor(name: string, prefix: string): string[] {
  const [, ...rules] = documentedRules();
  return [name, ...rules.map((r) => (r === '>CHANGE-ME' ? `>${PASSWORD}` : r === '~user-mirror:*' ? `~${prefix}:*` : r))];
}

beforeAll(async () => {
  redis = await launchRedis('acl', durableNodeArgs);
  // The test's own connection stays the default user: it sets the ACL up and reads ACL LOG.
  admin = new Redis({ host: '127.0.0.1', port: redis.port });
  standIn = await startStandIn({ port: 0, users: 60, seed: 5 });
  receiver = await startReceiver();
  dir = mkdtempSync(join(tmpdir(), 'redis-acl-'));
});

afterAll(async () => {
  await daemon?.stop('SIGKILL').catch(() => undefined);
  admin?.disconnect();
  await receiver?.close();
  await standIn?.close();
  if (redis !== undefined) await stopAll([redis]);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** `ACL LOG` as lines a failure message can show. */
async function aclLog(): Promise<string[]> {
  const entries = (await admin.call('ACL', 'LOG')) as unknown[][];
  return entries.map((e) => {
    const fields = new Map<string, unknown>();
    for (let i = 0; i + 1 < e.length; i += 2) fields.set(String(e[i]), e[i + 1]);
    return `${String(fields.get('username'))}: ${String(fields.get('reason'))} ${String(fields.get('object'))} (${String(fields.get('context'))})`;
  });
}

/** Everything an operator runs against the queues, as the ACL user; each must exit 0. */
const COMMANDS = [
  ['status'],
  ['status', '--json'],
  ['removals'],
  ['removals', '--failed'],
  ['removals', 'retry', '--all'],
  ['removals', 'adopt', '--all'],
  ['webhooks'],
  ['webhooks', '--failed'],
  ['webhooks', 'retry', '--all'],
];

async function runAsAclUser(user: string, prefix: string): Promise<void> {
  await admin.call('ACL', 'SETUSER', ...rulesFor(user, prefix));
  await admin.call('ACL', 'LOG', 'RESET');
  // The password-bearing REDIS_URL from a file, as the CLI requires (by value it is refused).
  const env = keysAsFiles(
    daemonEnv({
      redisUrl: `redis://${user}:${PASSWORD}@127.0.0.1:${redis.port}`,
      standIn,
      mirrorDb: join(dir, `${user}.db`),
      queuePrefix: prefix,
      mirrorId: user,
      statusPort: await freePort(),
      cron: '*/5 * * * * *',
      // `status` must answer 0: on a busy machine a run may be more than three 5 s ticks old.
      extra: { SYNC_STALE_AFTER_MS: '600000', WEBHOOK_URL: receiver.url, WEBHOOK_SECRET: SECRET, CHANGES_BASELINE: 'events' },
    }),
    join(dir, `keys-${user}`),
  );
  const before = receiver.delivered().length;
  // The first deliveries fail: the retry path (a delayed job) runs under the ACL too.
  receiver.answer = ({ n }) => (n - before < 2 ? { status: 503 } : { status: 204 });
  daemon = spawnDaemon(env);
  await daemon.ready;
  await daemon.waitForLog((l) => l.event === 'removals.redis_durability' && l.state === 'run', 30_000, 'the durability check passed');
  await daemon.waitForLog((l) => l.event === 'sync.finished' && l.status === 'succeeded', 30_000, 'a scheduled sync');
  await eventually(() => new Set(receiver.delivered()).size >= before + 60, 60_000, 'every webhook delivered');
  const member = standIn.members.list().find((m) => m.orgId !== '' && !m.memberId.startsWith('gone'));
  if (member === undefined) throw new Error('the stand-in has no members');
  const removal = await runCli(['remove-member', member.orgId, member.memberId, '--wait', '--timeout', '60'], env, 90_000);
  expect(removal.code, `${removal.stdout}\n${removal.stderr}`).toBe(0);
  for (const args of COMMANDS) {
    const run = await runCli(args, env, 60_000);
    expect(run.code, `user-mirror ${args.join(' ')}: ${run.stdout}\n${run.stderr}`).toBe(0);
  }
  expect(await daemon.stop('SIGTERM')).toEqual({ code: 0, signal: null });
  daemon = undefined;
  expect(await aclLog()).toEqual([]);
}

describe('a Redis user with only the documented ACL', () => {
  it('runs the daemon (sync schedule, webhooks, a removal) and status, removals and webhooks with no command refused', async () => {
    await runAsAclUser('user-mirror', 'user-mirror');
  }, 240_000);

  it('with a hash-tag prefix ({QUEUE_PREFIX} as on a Cluster) written as ~{prefix}:*', async () => {
    await runAsAclUser('tagged', '{tagged-mirror}');
  }, 240_000);

  it('is refused what it must not have: other keys, FLUSHALL, CONFIG SET, KEYS, pub/sub', async () => {
    await admin.call('ACL', 'SETUSER', ...rulesFor('narrow', 'user-mirror'));
    const user = new Redis({ host: '127.0.0.1', port: redis.port, username: 'narrow', password: PASSWORD, maxRetriesPerRequest: 0 });
    try {
      await expect(user.set('user-mirror:ok', '1')).resolves.toBe('OK');
      // A script's refusal says so in its own words (Redis 7.0: "can't access at least one of the keys").
      const refused = async (p: Promise<unknown>) => expect(p).rejects.toThrow(/NOPERM|can't access/);
      await refused(user.set('other:key', '1'));
      await refused(user.get('sessions:1'));
      await refused(user.flushall());
      await refused(user.config('SET', 'appendonly', 'no'));
      await refused(user.keys('*'));
      await refused(user.publish('chan', 'x'));
      await refused(user.eval("return redis.call('GET', 'other:key')", 0));
    } finally {
      user.disconnect();
    }
  });
});
