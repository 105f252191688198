/**
 * The daemon's sync, in a process of its own (started by ./child-process.ts).
 *
 * Why a process: a run's publish is one SQLite transaction of seconds to tens
 * of seconds (12-29 s for 300k users), and better-sqlite3 runs it
 * synchronously. Inside the daemon it froze the event loop: /healthz went
 * unanswered for 10 s, BullMQ's lock renewals and the removal worker waited.
 * Here it freezes only this process.
 *
 * Everything that writes the mirror during a run lives here, the sync lease
 * included: renewing the lease from the daemon would wait on the publish's
 * lock, synchronously, on the daemon's event loop. This is the same leased run
 * as `sync --once`.
 *
 * Configuration is read from the environment inherited from the daemon, the
 * same way the daemon reads it, so no secret crosses the IPC channel.
 *
 * Stopping: an 'abort' message or SIGTERM aborts the run (recorded as failed,
 * nothing published). SIGINT is ignored: Ctrl-C at a terminal reaches the
 * whole process group, and the daemon decides when its sync stops. If the
 * daemon goes away (the channel closes) the run is aborted too.
 */
import { readConfig } from '../runtime/config.js';
import { applyFilePolicy } from '../runtime/file-policy.js';
import { createLogger } from '../runtime/log.js';
import { errorMessage } from '../runtime/line-text.js';
import { serviceClientFromConfig } from '../service/client-from-config.js';
import { openMirror, withDatabasePath, type CheckpointMode, type Db } from '../../db/open.js';
import { fileIdentity, judgeIdentity, lossMessage, type FileIdentity } from '../../db/file-identity.js';
import { checkpointAfterSync, keepFailure, reserveRecord, runLeasedSync, SYNC_RUN_ENV } from './exclusive-run.js';
import { traceCheckpoint, traceSyncRun } from './sync-spans.js';
import { startTracing, stopTracing } from '../runtime/tracing.js';
import { ParentMessageSchema, SyncJobContextSchema, type ChildMessage } from './child-process.js';
import { syncConnections } from './process-settings.js';
import type { Logger } from 'pino';

function post(message: ChildMessage): Promise<void> {
  return new Promise((resolve) => {
    if (process.send === undefined || !process.connected) resolve();
    else process.send(message, undefined, {}, () => resolve());
  });
}

/**
 * The mirror the daemon opened, and no other: a file deleted or replaced
 * under the daemon is refused (src/daemon/mirror-watch.ts says why), before
 * the open and after it (a file swapped in between).
 */
function openDaemonsMirror(path: string, expected: FileIdentity | undefined, checkpoints: CheckpointMode): Db {
  if (expected === undefined) return openMirror(path, { checkpoints });
  const refuse = (): void => {
    const lost = judgeIdentity(expected, fileIdentity(path));
    if (lost !== undefined) throw new Error(lossMessage(path, lost));
  };
  refuse();
  const db = openMirror(path, { mustExist: true, checkpoints });
  try {
    refuse();
  } catch (err) {
    db.close();
    throw err;
  }
  return db;
}

async function main(): Promise<void> {
  const abort = new AbortController();
  const stop = (why: string) => () => abort.abort(new Error(why));
  process.on('message', (raw) => {
    if (ParentMessageSchema.safeParse(raw).success) stop('aborted by the daemon')();
  });
  process.once('disconnect', stop('the daemon went away'));
  process.once('SIGTERM', stop('SIGTERM'));
  process.on('SIGINT', () => undefined);

  let mirrorPath: string | undefined;
  let logger: Logger | undefined;
  try {
    applyFilePolicy();
    const config = readConfig(SYNC_RUN_ENV);
    mirrorPath = config.MIRROR_DB;
    const job = SyncJobContextSchema.parse(JSON.parse(process.argv[2] ?? '{}'));
    const log = createLogger(config).child({ role: 'sync' });
    logger = log;
    reserveRecord(config.MIRROR_DB, log);
    const db = openDaemonsMirror(config.MIRROR_DB, job.mirrorFile, config.MIRROR_CHECKPOINTS);
    const client = serviceClientFromConfig(
      // Every page in flight needs its own connection.
      { ...config, HTTP_CONNECTIONS: syncConnections(config.HTTP_CONNECTIONS, config.SYNC_CONCURRENCY, config.SYNC_VERIFY_CONCURRENCY) },
      { onResponse: (event) => void post({ type: 'response', event }) },
    );
    // Only when OTEL_* variables ask for traces is any of OpenTelemetry loaded (src/runtime/tracing.ts).
    await startTracing();
    await traceSyncRun(async (done) => {
      try {
        const outcome = await runLeasedSync({
          config,
          db,
          client,
          logger: log,
          signal: abort.signal,
          onLeased: () => log.info({ event: 'sync.job_started', ...job }, 'sync job started'),
        });
        done(outcome.ran ? outcome.value : undefined);
        await post({ type: 'done', outcome });
        traceCheckpoint(() => checkpointAfterSync(db, log, outcome, config.MIRROR_CHECKPOINTS));
      } finally {
        await client.close().catch(() => undefined);
        db.close();
      }
    });
  } catch (err) {
    const named = mirrorPath === undefined ? err : withDatabasePath(err, mirrorPath);
    // Besides the failed job in Redis: `status` on this host reads it without Redis.
    if (mirrorPath !== undefined && logger !== undefined) keepFailure(mirrorPath, 'sync', named, logger);
    await post({ type: 'error', message: errorMessage(named) });
    process.exitCode = 1;
  }
  await stopTracing();
  if (process.connected) process.disconnect();
  exitIfStillAlive(logger);
}

/**
 * The run is over and everything it opened is closed: the process should
 * exit by itself now. If something still holds it (a connection that never
 * frees, issue 40), it exits anyway, and says so, rather than live on by that
 * handle. Unref'd: a process that exits by itself never waits for it.
 */
function exitIfStillAlive(logger: Logger | undefined): void {
  setTimeout(() => {
    logger?.warn({ event: 'sync.process_lingered', afterMs: LINGER_MS }, 'sync process still alive after its run; exiting');
    process.exit();
  }, LINGER_MS).unref();
}

/** Well within the daemon's SYNC_EXIT_WITHIN_MS (src/daemon/workers.ts), which kills a child that outlives it. */
const LINGER_MS = 3_000;

void main();
