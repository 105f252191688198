/**
 * `user-mirror serve`: the mirror as a read-only replica of the service's
 * list and resolve endpoints (src/replica), on REPLICA_HOST:REPLICA_PORT
 * (default 127.0.0.1:8788), until SIGINT or SIGTERM.
 *
 * REPLICA_WORKERS (default 1) processes answer on the one port
 * (node:cluster: the primary accepts and hands connections round-robin to
 * its workers), each with its own readonly connection to the mirror: a
 * replica on every core the machine gives it. The primary only watches: a
 * worker that dies is started again (at most one restart a second), and a
 * stop signal stops them all.
 *
 * Without REPLICA_API_KEY a key is generated and printed once on stdout:
 * the only place it ever appears (workers get it from the primary). Exit 2
 * for a configuration error (among them REPLICA_API_KEY equal to
 * SERVICE_API_KEY), 1 when the mirror cannot be opened or the port bound.
 */
import cluster, { type Worker } from 'node:cluster';
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { parseCommandArgs } from './args.js';
import { ConfigPass, isGiven, REPLICA_ENV, SERVE_ENV } from '../runtime/config.js';
import { createLogger } from '../runtime/log.js';
import { replicaSettings, SERVE_DEFAULT_PORT, type ReplicaConfig, type ReplicaSettings } from '../replica/settings.js';
import { startReplica } from '../replica/start.js';
import { untilStopSignal } from '../runtime/lifecycle.js';
import { settleWithin } from '../runtime/deadline.js';
import { openFileLimit } from '../runtime/descriptor-limit.js';
import type { Logger } from 'pino';

const Args = z.object({ positionals: z.array(z.string()).max(0, 'takes no arguments') });

/** How long stopping waits for the workers before it kills them. */
const STOP_WORKERS_MS = 10_000;

export default async function serve(argv: string[]): Promise<number> {
  parseCommandArgs(argv, {}, Args);
  // One pass: the replica's variables, the service key and the check across them report together.
  // SERVICE_API_KEY is read only to refuse it as the replica's key, so only when given.
  const pass = new ConfigPass([...SERVE_ENV, ...(isGiven('SERVICE_API_KEY') ? (['SERVICE_API_KEY'] as const) : [])]);
  const candidateKey = `rk_${randomBytes(24).toString('hex')}`;
  pass.check(REPLICA_ENV, (c) => serveSettings(c, candidateKey));
  const config = pass.done();
  const generatedKey = config.REPLICA_API_KEY === undefined ? candidateKey : undefined;
  const settings = serveSettings(config, candidateKey);
  const logger = createLogger(config);
  if (cluster.isWorker) return serveOne(config.MIRROR_DB, settings, logger);
  const printKey = () => {
    if (generatedKey !== undefined) {
      process.stdout.write(
        `# generated for this run (set REPLICA_API_KEY to keep one across restarts):\nREPLICA_API_KEY=${generatedKey}\n`,
      );
    }
  };
  if (config.REPLICA_WORKERS === 1) return serveOne(config.MIRROR_DB, settings, logger, printKey);
  return servePrimary(config.REPLICA_WORKERS, settings, logger, printKey);
}

/** The replica's settings; `candidateKey` is its key only when REPLICA_API_KEY is unset (then printed once). */
function serveSettings(config: ReplicaConfig & { SERVICE_API_KEY?: string | undefined }, candidateKey: string): ReplicaSettings {
  return replicaSettings(config, {
    serviceApiKey: config.SERVICE_API_KEY,
    defaultPort: SERVE_DEFAULT_PORT,
    generatedKey: candidateKey,
    descriptorLimit: openFileLimit(),
  });
}

/** One process answering: the whole replica, or one worker of several. */
async function serveOne(mirrorDb: string, settings: ReplicaSettings, logger: Logger, started?: () => void): Promise<number> {
  const replica = await startReplica(mirrorDb, settings, logger);
  started?.();
  const signal = await untilStopSignal();
  await replica.close();
  logger.info({ event: 'replica.stopped', signal }, 'replica stopped');
  // A worker's channel to the primary would keep it alive.
  cluster.worker?.disconnect();
  return 0;
}

/** Forks `count` workers on the shared port and keeps them running until a stop signal. */
async function servePrimary(count: number, settings: ReplicaSettings, logger: Logger, started: () => void): Promise<number> {
  // Workers read the same environment; the key they must accept comes from here (it may be generated).
  const env = { REPLICA_API_KEY: settings.apiKey };
  let stopping = false;
  const fork = (): Worker => cluster.fork(env);
  const listening = Array.from({ length: count }, () => fork()).map(
    (worker) =>
      new Promise<boolean>((resolve) => {
        worker.once('listening', () => resolve(true));
        worker.once('exit', () => resolve(false));
      }),
  );
  if (!(await Promise.all(listening)).every(Boolean)) {
    logger.error({ event: 'replica.workers_failed' }, 'a replica worker could not start; stopping');
    await stopWorkers();
    return 1;
  }
  logger.info({ event: 'replica.workers', workers: count, port: settings.port }, `replica answering with ${count} processes`);
  started();
  let lastRestart = 0;
  cluster.on('exit', (worker, code, signal) => {
    if (stopping) return;
    logger.error({ event: 'replica.worker_exited', pid: worker.process.pid, code, signal }, 'a replica worker exited; starting another');
    const wait = Math.max(0, lastRestart + 1_000 - Date.now());
    lastRestart = Date.now() + wait;
    setTimeout(() => {
      if (!stopping) fork();
    }, wait).unref();
  });
  const signal = await untilStopSignal();
  stopping = true;
  await stopWorkers();
  logger.info({ event: 'replica.stopped', signal, workers: count }, 'replica stopped');
  return 0;
}

async function stopWorkers(): Promise<void> {
  const workers = Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined);
  const exited = Promise.all(workers.map((w) => new Promise((resolve) => (w.isDead() ? resolve(undefined) : w.once('exit', resolve)))));
  for (const w of workers) w.process.kill('SIGTERM');
  if (!(await settleWithin(exited, STOP_WORKERS_MS))) for (const w of workers) if (!w.isDead()) w.process.kill('SIGKILL');
}
