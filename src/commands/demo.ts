/**
 * `user-mirror demo` (`npm run demo`): the first thing a new user sees. It
 * runs the real commands, as child processes, and prints each one before it
 * runs, so the demo doubles as a tour of the CLI:
 *
 *   1. a stand-in service with 100,000 users, unless SERVICE_BASE_URL is set
 *      (all in today's wire shape, or `--legacy-records R` of them older);
 *   2. `sync --once` into the mirror, with progress;
 *   3. `resolve` of one user, offline, from the mirror;
 *   4. a removal worker and `remove-member --wait`, on a Redis of the demo's
 *      own (demo-redis.ts: REDIS_URL when set, else a private redis-server;
 *      skipped, with a note, when there is neither);
 *   5. `status`.
 *
 * Against the stand-in the mirror is ./data/demo.db (or MIRROR_DB) and the
 * queue prefix `user-mirror-demo` (or QUEUE_PREFIX), so a demo never mixes
 * fake users or jobs into a real deployment's. The demo says where its
 * mirror is, first and last. Its own ./data/demo.db (and the audit beside
 * it) starts fresh on every run, so a run with fewer `--users` than the
 * last is not a mass deletion; a MIRROR_DB the operator gave is synced
 * into as it is (said so). A sync that ends partial is said loudly and
 * the demo exits 4, as `sync --once` does. The stand-in listens on 8787
 * when it is free and its keys come from its seed, so a rerun serves the same
 * removal target.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { parseCommandArgs } from './args.js';
import { readConfig } from '../runtime/config.js';
import { openMirror } from '../../db/open.js';
import { firstActiveClientUserId } from '../../db/mirror-reader.js';
import { auditPathFor } from '../../db/audit-location.js';
import { Redis } from 'ioredis';
import { describeRedisUrl } from '../../jobs/redis-connection.js';
import { createRemovalQueue } from '../../jobs/removals/queue-handle.js';
import { demoRedis, type DemoRedis } from './demo-redis.js';
import { startStandIn, type StandIn } from '../stand-in/index.js';
import { LegacyRecordsArg, describeLegacyShare } from './stand-in.js';

const Args = z.object({
  users: z.coerce.number().int().min(1).max(5_000_000).default(100_000),
  'legacy-records': LegacyRecordsArg,
  positionals: z.array(z.string()).max(0, 'takes no arguments'),
});

/** The demo's queues live apart from any deployment's. */
const DEMO_PREFIX = 'user-mirror-demo';

/** The demo's own mirror against the stand-in, apart from a deployment's ./data/mirror.db. */
const DEMO_MIRROR_DB = './data/demo.db';

const CLI = fileURLToPath(new URL('../../cli.js', import.meta.url));

export default async function demo(argv: string[]): Promise<number> {
  const args = parseCommandArgs(argv, { users: { type: 'string' }, 'legacy-records': { type: 'string' } }, Args);
  const env: NodeJS.ProcessEnv = { ...process.env };
  let standIn: StandIn | undefined;
  if (!env.SERVICE_BASE_URL) {
    const legacyRecords = args['legacy-records'];
    standIn = await startOnFixedPort({ users: args.users, seed: 1, legacyRecords });
    Object.assign(env, {
      SERVICE_BASE_URL: standIn.baseUrl,
      SERVICE_API_KEY: standIn.apiKey,
      SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
      MANAGEMENT_URL: standIn.managementUrl,
      MANAGEMENT_KEY: standIn.managementKey,
      QUEUE_PREFIX: env.QUEUE_PREFIX || DEMO_PREFIX,
    });
    const users = `${args.users.toLocaleString('en-US')} users, ${describeLegacyShare(legacyRecords)} of them legacy records`;
    say(`No SERVICE_BASE_URL configured: started the local stand-in with ${users}, at ${standIn.baseUrl}`);
    if (!env.MIRROR_DB) {
      env.MIRROR_DB = DEMO_MIRROR_DB;
      removeDemoMirror(DEMO_MIRROR_DB);
      say(`Mirror: ${DEMO_MIRROR_DB}, the demo's own, started fresh (a previous demo's is removed; MIRROR_DB names another file).`);
    } else say(`Mirror: ${env.MIRROR_DB} (MIRROR_DB): the demo syncs into what it holds.`);
  } else {
    say(`Using the service at ${env.SERVICE_BASE_URL}`);
    say(`Mirror: ${readConfig(['MIRROR_DB'], env).MIRROR_DB}`);
  }
  try {
    return await tour(env, standIn);
  } finally {
    await standIn?.close();
  }
}

/** The demo mirror's files and its audit's: only ever the demo's own default path. */
function removeDemoMirror(path: string): void {
  for (const base of [path, auditPathFor(path)]) {
    for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(`${base}${suffix}`, { force: true });
  }
}

async function tour(env: NodeJS.ProcessEnv, standIn: StandIn | undefined): Promise<number> {
  const config = readConfig(['MIRROR_DB', 'REDIS_URL'], env);
  const synced = await run(['sync', '--once'], env);
  if (synced !== 0 && synced !== 4) return synced;
  if (synced === 4) {
    say(
      `THE SYNC ENDED PARTIAL (its reason is printed above): ${config.MIRROR_DB} may hold an older state. The tour goes on; the demo exits 4.`,
    );
  }
  const code = await afterSync(env, standIn, config);
  say(
    `The demo's mirror is ${config.MIRROR_DB}: query it with MIRROR_DB=${config.MIRROR_DB} npx user-mirror … (README, "After the demo").`,
  );
  // After a partial sync `status` exits 1 (a partial newest run needs attention): the tour said so already, and exits 4.
  if (synced === 4) return code === 0 || code === 1 ? 4 : code;
  return code;
}

async function afterSync(
  env: NodeJS.ProcessEnv,
  standIn: StandIn | undefined,
  config: { MIRROR_DB: string; REDIS_URL?: string | undefined },
): Promise<number> {
  const sample = sampleClientUserId(config.MIRROR_DB);
  if (sample === undefined) say('The mirror holds no active user, so there is nothing to resolve.');
  else await run(['resolve', sample], env);

  const redis = await demoRedis(config.REDIS_URL);
  if ('none' in redis) {
    say(`No Redis for the removal-queue steps (${redis.none}): skipping them (install redis-server, or set REDIS_URL, to see them).`);
    // Without Redis `status` exits 1 (needs attention); the tour has already said why.
    const code = await run(['status'], env);
    return code === 1 ? 0 : code;
  }
  // A Redis the operator gave stays as given (REDIS_URL, or REDIS_URL_FILE for one with a password).
  const withRedis = { ...env, ...(redis.own ? { REDIS_URL: redis.url } : DEMO_WORKER_ENV) };
  try {
    await removalTour(withRedis, standIn, redis);
    // Status describes the Redis as the demo's worker used it.
    return await run(['status'], withRedis);
  } finally {
    await redis.close();
  }
}

/** A Redis the operator gave may have no persistence; a production worker refuses one (exit 2), the demo's may use it. */
const DEMO_WORKER_ENV = { ALLOW_VOLATILE_REDIS: '1' } as const;

async function removalTour(env: NodeJS.ProcessEnv, standIn: StandIn | undefined, redis: DemoRedis): Promise<void> {
  const member = standIn?.members.list()[0];
  if (member === undefined || standIn === undefined) {
    say('Against a real service the demo enqueues no removal: it would delete a real member.');
    return;
  }
  const prefix = env.QUEUE_PREFIX ?? DEMO_PREFIX;
  if (redis.own) say(`Started a private redis-server for the removal queue at ${describeRedisUrl(redis.url)} (gone when the demo ends).`);
  else {
    say(
      `Using the Redis at REDIS_URL (${describeRedisUrl(redis.url)}) under the prefix ${prefix}; the demo removes its queue there afterwards. ` +
        'Its worker runs with ALLOW_VOLATILE_REDIS=1, so it also runs on a Redis without AOF persistence; in production give the ' +
        'queue a Redis with `appendonly yes` and `maxmemory-policy noeviction` (docs/removals.md: "Redis for the removal queue").',
    );
  }
  // The worker's JSON log lines would drown the tour; warnings still show.
  const worker = start(['worker', 'removals'], { ...env, LOG_LEVEL: env.LOG_LEVEL || 'warn' });
  try {
    await run(['remove-member', member.orgId, member.memberId, '--reason', 'demo', '--wait', '--timeout', '30'], env);
  } finally {
    worker.kill('SIGTERM');
    await new Promise((resolve) => worker.once('exit', resolve));
    if (!redis.own) await removeDemoQueue(redis.url, standIn.managementUrl, prefix);
  }
}

/**
 * What the demo wrote into a Redis it was given: its removal queue, and under
 * its own prefix (the default `user-mirror-demo`) every key, the worker's
 * limiter and meta keys included. A prefix the operator chose keeps all but
 * the queue, which may share it with real work.
 */
async function removeDemoQueue(url: string, managementUrl: string, prefix: string): Promise<void> {
  // A single node (REDIS_URL), so a plain client can scan it.
  const connection = new Redis(url, { connectionName: 'user-mirror:demo', maxRetriesPerRequest: 1 });
  const queue = createRemovalQueue(connection, { target: managementUrl, prefix });
  try {
    await queue.obliterate({ force: true });
    if (prefix === DEMO_PREFIX) {
      for await (const keys of connection.scanStream({ match: `${DEMO_PREFIX}:*`, count: 500 }) as AsyncIterable<string[]>) {
        if (keys.length > 0) await connection.del(...keys);
      }
    }
  } finally {
    await queue.close();
    connection.disconnect();
  }
}

/** The stand-in on its usual port when free, so a rerun keeps one removal target; any port otherwise. */
async function startOnFixedPort(options: { users: number; seed: number; legacyRecords: number | undefined }): Promise<StandIn> {
  try {
    return await startStandIn({ port: 8787, ...options });
  } catch (err) {
    if ((err as { code?: string }).code !== 'EADDRINUSE') throw err;
    return startStandIn({ port: 0, ...options });
  }
}

function sampleClientUserId(dbPath: string): string | undefined {
  const db = openMirror(dbPath, { readonly: true });
  try {
    return firstActiveClientUserId(db);
  } finally {
    db.close();
  }
}

function say(line: string): void {
  process.stdout.write(`\n== ${line}\n`);
}

function start(command: string[], env: NodeJS.ProcessEnv): ChildProcess {
  say(`user-mirror ${command.join(' ')}`);
  return spawn(process.execPath, [CLI, ...command], { env, stdio: 'inherit' });
}

function run(command: string[], env: NodeJS.ProcessEnv): Promise<number> {
  const child = start(command, env);
  return new Promise((resolve) => child.once('exit', (code) => resolve(code ?? 1)));
}
