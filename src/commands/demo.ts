/**
 * `user-mirror demo` (`npm run demo`): the first thing a new user sees. It
 * runs the real commands, as child processes, and prints each one before it
 * runs, so the demo doubles as a tour of the CLI:
 *
 *   1. a stand-in service with 100,000 users, unless SERVICE_BASE_URL is set
 *      (all in today's wire shape, or `--legacy-records R` of them older);
 *   2. `sync --once` into the mirror, with progress;
 *   3. `resolve` of one user, offline, from the mirror;
 *   4. with Redis: a removal worker and `remove-member --wait` (skipped, with
 *      a note, when no Redis answers);
 *   5. `status`.
 *
 * Against the stand-in the mirror is ./data/demo.db (or MIRROR_DB) and the
 * queue prefix `user-mirror-demo` (or QUEUE_PREFIX), so a demo never mixes
 * fake users or jobs into a real deployment's.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { z } from 'zod';
import { parseCommandArgs } from './args.js';
import { readConfig } from '../runtime/config.js';
import { openMirror } from '../../db/open.js';
import { DEFAULT_REDIS_URL, describeRedisUrl } from '../../jobs/redis-connection.js';
import { startStandIn, type StandIn } from '../stand-in/index.js';
import { LegacyRecordsArg, describeLegacyShare } from './stand-in.js';

const Args = z.object({
  users: z.coerce.number().int().min(1).max(5_000_000).default(100_000),
  'legacy-records': LegacyRecordsArg,
  positionals: z.array(z.string()).max(0, 'takes no arguments'),
});

const CLI = fileURLToPath(new URL('../../cli.js', import.meta.url));

export default async function demo(argv: string[]): Promise<number> {
  const args = parseCommandArgs(argv, { users: { type: 'string' }, 'legacy-records': { type: 'string' } }, Args);
  const env: NodeJS.ProcessEnv = { ...process.env };
  let standIn: StandIn | undefined;
  if (!env.SERVICE_BASE_URL) {
    const legacyRecords = args['legacy-records'];
    standIn = await startStandIn({ port: 0, users: args.users, seed: 1, legacyRecords });
    Object.assign(env, {
      SERVICE_BASE_URL: standIn.baseUrl,
      SERVICE_API_KEY: standIn.apiKey,
      SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
      MANAGEMENT_URL: standIn.managementUrl,
      MANAGEMENT_KEY: standIn.managementKey,
      MIRROR_DB: env.MIRROR_DB || './data/demo.db',
      QUEUE_PREFIX: env.QUEUE_PREFIX || 'user-mirror-demo',
    });
    const users = `${args.users.toLocaleString('en-US')} users, ${describeLegacyShare(legacyRecords)} of them legacy records`;
    say(`No SERVICE_BASE_URL configured: started the local stand-in with ${users}, at ${standIn.baseUrl}`);
  } else {
    say(`Using the service at ${env.SERVICE_BASE_URL}`);
  }
  try {
    return await tour(env, standIn);
  } finally {
    await standIn?.close();
  }
}

async function tour(env: NodeJS.ProcessEnv, standIn: StandIn | undefined): Promise<number> {
  const config = readConfig(['MIRROR_DB', 'REDIS_URL'], env);
  const redisUrl = config.REDIS_URL ?? DEFAULT_REDIS_URL;
  const synced = await run(['sync', '--once'], env);
  if (synced !== 0 && synced !== 4) return synced;

  const sample = sampleClientUserId(config.MIRROR_DB);
  if (sample === undefined) say('The mirror holds no active user, so there is nothing to resolve.');
  else await run(['resolve', sample], env);

  const redisUp = await redisAnswers(redisUrl);
  if (redisUp) {
    await removalTour(env, standIn);
  } else {
    say(
      `No Redis answered at ${describeRedisUrl(redisUrl)}: skipping the removal-queue steps (start redis-server, or set REDIS_URL, to see them).`,
    );
  }
  // Status describes the Redis as the demo's worker used it.
  const code = await run(['status'], { ...env, ...DEMO_WORKER_ENV });
  // Without Redis `status` exits 1 (needs attention); the tour has already said why.
  return !redisUp && code === 1 ? 0 : code;
}

/** A development Redis usually has no persistence; a production worker refuses one (exit 2), the demo's may use it. */
const DEMO_WORKER_ENV = { ALLOW_VOLATILE_REDIS: '1' } as const;

async function removalTour(env: NodeJS.ProcessEnv, standIn: StandIn | undefined): Promise<void> {
  const member = standIn?.members.list()[0];
  if (member === undefined) {
    say('Against a real service the demo enqueues no removal: it would delete a real member.');
    return;
  }
  say(
    'The demo starts its removal worker with ALLOW_VOLATILE_REDIS=1, so it also runs on a Redis without AOF persistence ' +
      '(which can lose queued removals). In production give the queue a Redis with `appendonly yes` and ' +
      '`maxmemory-policy noeviction` (docs/removals.md: "Redis for the removal queue").',
  );
  // The worker's JSON log lines would drown the tour; warnings still show.
  const worker = start(['worker', 'removals'], { ...env, ...DEMO_WORKER_ENV, LOG_LEVEL: env.LOG_LEVEL || 'warn' });
  try {
    await run(['remove-member', member.orgId, member.memberId, '--reason', 'demo', '--wait', '--timeout', '30'], env);
  } finally {
    worker.kill('SIGTERM');
    await new Promise((resolve) => worker.once('exit', resolve));
  }
}

function sampleClientUserId(dbPath: string): string | undefined {
  const db = openMirror(dbPath, { readonly: true });
  try {
    const row = db.prepare('SELECT client_user_id FROM active_users ORDER BY user_id LIMIT 1').get() as
      { client_user_id: string } | undefined;
    return row?.client_user_id;
  } finally {
    db.close();
  }
}

async function redisAnswers(url: string): Promise<boolean> {
  const redis = new Redis(url, { lazyConnect: true, connectTimeout: 1_000, maxRetriesPerRequest: 0, retryStrategy: () => null });
  redis.on('error', () => undefined);
  try {
    await redis.connect();
    return (await redis.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    redis.disconnect();
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
