/**
 * `user-mirror sync --once [--concurrency N]`: one sync run against the
 * configured service, into MIRROR_DB.
 *
 * On a terminal, a progress line is redrawn on stderr and the run ends with a
 * table; elsewhere (cron, pm2, CI) progress and summary are pino log lines,
 * because a redrawn line is noise in a log file.
 *
 * Exit codes: 0 succeeded (every page read; users missing from the listing
 * were checked upstream and only confirmed ones deleted); 4 partial (the
 * mirror got every record that was read, but deletions were held back:
 * failed pages or the mass-delete breaker; the reason is printed); 1 failed (nothing
 * published; the mirror is as before); 2 usage or configuration error; 5 not
 * started because another sync (the daemon's, or another `sync --once`)
 * holds this mirror's sync lease. Partial has its own code because it usually
 * needs a look (a tripped breaker never clears by itself), yet is not a
 * failure of the run (a refused key, 401/403, or a run past SYNC_MAX_DURATION_MS
 * is a failure: exit 1). Busy has its own so that a cron wrapper can tell "the
 * mirror is being synced anyway" from a failure.
 *
 * The run holds the sync lease (db/sync-lease.ts) like the daemon's worker:
 * without it, starting a run would mark the daemon's running one interrupted.
 *
 * `--once` is required for now: the schedule belongs to the daemon, and a bare
 * `sync` should not silently mean either.
 */
import { z } from 'zod';
import { parseCommandArgs } from './args.js';
import { readConfig } from '../runtime/config.js';
import { createLogger, humanLog } from '../runtime/log.js';
import { serviceClientFromConfig } from '../service/client-from-config.js';
import { openMirror, withDatabasePath, type Db } from '../../db/open.js';
import type { LeasedOutcome } from '../../db/sync-lease.js';
import { checkpointAfterSync, keepFailure, reserveRecord, runLeasedSync, SYNC_RUN_ENV } from '../sync/exclusive-run.js';
import { traceCheckpoint, traceSyncRun } from '../sync/sync-spans.js';
import { formatCount, formatDuration, LogProgress, TerminalProgress, type ProgressSink } from '../sync/progress.js';
import { syncConnections } from '../sync/process-settings.js';
import type { SyncStatus, SyncSummary } from '../sync/run-summary.js';

const EXIT: Record<SyncStatus, number> = { succeeded: 0, partial: 4, failed: 1 };
const EXIT_BUSY = 5;

const Args = z.object({
  once: z.literal(true, {
    error: "is required: this command runs one sync; the schedule is 'user-mirror daemon' (under pm2: ecosystem.config.cjs)",
  }),
  concurrency: z.coerce.number().int().min(1).max(64).optional(),
  positionals: z.array(z.string()).max(0, 'takes no arguments'),
});

export default async function sync(argv: string[]): Promise<number> {
  const args = parseCommandArgs(argv, { once: { type: 'boolean' }, concurrency: { type: 'string' } }, Args);
  const config = readConfig(SYNC_RUN_ENV);
  const concurrency = args.concurrency ?? config.SYNC_CONCURRENCY;
  const interactive = process.stderr.isTTY === true;

  const terminal = interactive ? new TerminalProgress(process.stderr) : undefined;
  // At a terminal, sentences beside the progress line (retries as they happen, warnings),
  // never JSON; elsewhere JSON lines on stdout.
  const logger = createLogger(config, terminal === undefined ? process.stdout : humanLog(terminal.around(process.stderr)));
  const progress: ProgressSink = terminal ?? new LogProgress(logger);

  // An attempt that fails before its run row is written leaves its reason beside the mirror, for `status`.
  const failed = (err: unknown): unknown => {
    const named = withDatabasePath(err, config.MIRROR_DB);
    keepFailure(config.MIRROR_DB, 'sync', named, logger);
    return named;
  };
  reserveRecord(config.MIRROR_DB, logger);
  let db: Db;
  try {
    db = openMirror(config.MIRROR_DB, { checkpoints: config.MIRROR_CHECKPOINTS });
  } catch (err) {
    throw failed(err);
  }
  // Every page in flight needs its own connection, or the pool queues what concurrency asked for.
  const client = serviceClientFromConfig({
    ...config,
    HTTP_CONNECTIONS: syncConnections(config.HTTP_CONNECTIONS, concurrency, config.SYNC_VERIFY_CONCURRENCY),
  });
  const abort = new AbortController();
  const onSignal = () => abort.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  let outcome: LeasedOutcome<SyncSummary> | undefined;
  await traceSyncRun(async (done) => {
    try {
      outcome = await runLeasedSync({
        config,
        db,
        client,
        logger,
        concurrency,
        signal: abort.signal,
        onProgress: (s) => progress.update(s),
      });
      done(outcome.ran ? outcome.value : undefined);
    } catch (err) {
      throw failed(err);
    } finally {
      progress.finish();
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      await client.close();
      traceCheckpoint(() => checkpointAfterSync(db, logger, outcome, config.MIRROR_CHECKPOINTS));
      db.close();
    }
  });
  if (outcome === undefined) throw new Error('sync ended without an outcome');
  if (!outcome.ran) {
    const { pid, host } = outcome.heldBy;
    process.stderr.write(`user-mirror sync: a sync is already running on this mirror (pid ${pid} on host ${host}); not starting another\n`);
    return EXIT_BUSY;
  }
  const summary = outcome.value;
  if (interactive) process.stderr.write(summaryTable(summary));
  return EXIT[summary.status];
}

function summaryTable(s: SyncSummary): string {
  const total = (n: number | undefined) => (n === undefined ? '-' : formatCount(n));
  const rows: Array<[string, string]> = [
    ['run', String(s.runId)],
    ['status', s.status],
    ['pages', `${formatCount(s.pages)}${s.pageFailures > 0 ? ` (${s.pageFailures} failed)` : ''}`],
    ['users seen', formatCount(s.usersSeen)],
    ['total (start/end)', `${total(s.totalAtStart)} / ${total(s.totalAtEnd)}`],
    ['created', formatCount(s.created)],
    ['updated', formatCount(s.updated)],
    ['deleted', formatCount(s.deleted)],
    ['rejected', formatCount(s.rejected)],
    ['missing from listing', missingLine(s)],
    ['duration', formatDuration(s.durationMs)],
    ['rate', `${formatCount(Math.round(s.durationMs > 0 ? (s.usersSeen * 1000) / s.durationMs : 0))} users/s`],
  ];
  if (s.reason !== undefined) rows.push([s.status === 'failed' ? 'error' : 'no deletions because', s.reason]);
  const width = Math.max(...rows.map(([k]) => k.length));
  return `\n${rows.map(([k, v]) => `  ${k.padEnd(width)}  ${v}`).join('\n')}\n\n`;
}

/** What became of the users the listing did not show: only confirmed ones are deleted. */
function missingLine(s: SyncSummary): string {
  if (s.candidates === 0) return '0';
  const parts = [`${formatCount(s.confirmedGone)} confirmed gone`, `${formatCount(s.stillThere)} still there (skipped by the listing)`];
  if (s.unverified > 0) parts.push(`${formatCount(s.unverified)} could not be checked`);
  if (s.deferred > 0) parts.push(`${formatCount(s.deferred)} left for a later run`);
  return `${formatCount(s.candidates)}: ${parts.join(', ')}`;
}
