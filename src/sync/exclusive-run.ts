/**
 * One sync run under the sync lease, with the engine's settings taken from
 * configuration: what `sync --once` runs, and what the daemon's sync process
 * (./child-main.ts) runs, so the two cannot drift apart.
 */
import { LEASED_SYNC_ENV, SERVICE_ENV, type Config } from '../runtime/config.js';
import { errorMessage } from '../runtime/line-text.js';
import { checkpointMirror, copyWalPassive, databaseFileSizes, withDatabasePath, type CheckpointMode, type Db } from '../../db/open.js';
import { hasRecordedRun } from '../../db/sync-runs.js';
import type { LossKind } from '../../db/file-identity.js';
import {
  recordCheckpoint,
  recordFailedAttempt,
  recordMirrorLoss,
  recordRunCheckpointedElsewhere,
  reserveAttemptRecord,
  type AttemptFailure,
} from './attempt-record.js';
import type { ProgressSnapshot } from './progress.js';
import { runSync } from './engine.js';
import type { DirectorySource, FeedSource } from './source.js';
import { sqliteRunWriter } from './run-writer.js';
import { withSyncLease, type LeasedOutcome } from '../../db/sync-lease.js';
import { purgeChangeLog, purgeDeletedUsers, purgeHistory } from '../../db/purge.js';
import type { SyncSummary } from './run-summary.js';
import type { Logger } from 'pino';

/** What a sync run reads, in `sync --once` and in the daemon's sync child alike (the daemon checks these too: DAEMON_ENV). */
export const SYNC_RUN_ENV = [...SERVICE_ENV, ...LEASED_SYNC_ENV, 'MIRROR_DB', 'LOG_LEVEL'] as const;

export interface LeasedSyncParams {
  config: Config<(typeof LEASED_SYNC_ENV)[number]>;
  db: Db;
  /** The service client: the directory, and with SYNC_FOLLOW_LEADER the leader's feed too (./source.ts). */
  client: DirectorySource & FeedSource;
  logger: Logger;
  /** Overrides SYNC_CONCURRENCY (`sync --concurrency`). */
  concurrency?: number;
  signal?: AbortSignal;
  onProgress?: (snapshot: ProgressSnapshot) => void;
  /** Called once the lease is held, just before the run starts. */
  onLeased?: () => void;
}

export function runLeasedSync(p: LeasedSyncParams): Promise<LeasedOutcome<SyncSummary>> {
  // Measured before the lease's own write, which lands in the WAL too.
  const leftInWal = walBytesOf(p.db);
  // A mirror no run has written yet holds only its new schema there: copied all the same, but not
  // reported as the retry of an earlier run's checkpoint.
  const earlierRun = hasRecordedRun(p.db);
  return withSyncLease(
    p.db,
    {
      signal: p.signal,
      onLost: () => p.logger.error({ event: 'sync.lease_lost' }, 'sync lease lost to another process; aborting this sync'),
    },
    async (signal) => {
      p.onLeased?.();
      if (leftInWal > 0 && p.config.MIRROR_CHECKPOINTS !== 'external') retryCheckpoint(p.db, p.logger, earlierRun);
      const summary = await runSync({
        client: p.client,
        writer: sqliteRunWriter(p.db, undefined, { baseline: p.config.CHANGES_BASELINE }),
        concurrency: p.concurrency ?? p.config.SYNC_CONCURRENCY,
        maxDeleteRatio: p.config.SYNC_MAX_DELETE_RATIO,
        pageAttempts: p.config.SYNC_PAGE_ATTEMPTS,
        pageRetryBudgetMs: p.config.SYNC_PAGE_RETRY_BUDGET_MS,
        maxDurationMs: p.config.SYNC_MAX_DURATION_MS,
        maxRecordBytes: p.config.SYNC_MAX_RECORD_BYTES,
        maxVerify: p.config.SYNC_MAX_VERIFY,
        leaderMaxAgeMs: p.config.SYNC_LEADER_MAX_AGE_MS,
        ...(p.config.SYNC_FOLLOW_LEADER && { follow: { team: p.config.SYNC_FOLLOW_TEAM, feed: p.client } }),
        verifyConcurrency: p.config.SYNC_VERIFY_CONCURRENCY,
        logger: p.logger,
        signal,
        onProgress: p.onProgress,
      });
      // Under the lease, after the run: no other writer of ours between the publish and the purge.
      if (summary.status !== 'failed') {
        const now = new Date();
        purgeAfterSync(p.db, 'users', p.config.DELETED_RETENTION_DAYS, p.logger, now);
        purgeAfterSync(p.db, 'log', p.config.CHANGE_LOG_RETENTION_DAYS, p.logger, now);
        purgeAfterSync(p.db, 'history', p.config.HISTORY_RETENTION_DAYS, p.logger, now);
      }
      return summary;
    },
  );
}

/** What a purge after a sync drops, by age: soft-deleted users, change-log rows, ended history (db/purge.ts). */
const PURGES = {
  users: { purge: purgeDeletedUsers, event: 'mirror.purged', field: 'users', what: 'users deleted', setting: 'DELETED_RETENTION_DAYS' },
  log: {
    purge: purgeChangeLog,
    event: 'mirror.log_purged',
    field: 'rows',
    what: 'change-log rows written',
    setting: 'CHANGE_LOG_RETENTION_DAYS',
  },
  history: {
    purge: purgeHistory,
    event: 'mirror.history_purged',
    field: 'rows',
    what: 'history rows ended',
    setting: 'HISTORY_RETENTION_DAYS',
  },
} as const;

/**
 * Drops what is older than `retentionDays` (0: nothing), a batch a run; a
 * failure (the mirror busy or full) is logged and left to the next run.
 */
function purgeAfterSync(db: Db, kind: keyof typeof PURGES, retentionDays: number, logger: Logger, now: Date): number {
  if (retentionDays === 0) return 0;
  const p = PURGES[kind];
  const cutoff = new Date(now.getTime() - retentionDays * 86_400_000).toISOString();
  try {
    const purged = p.purge(db, cutoff);
    if (purged > 0)
      logger.info({ event: p.event, [p.field]: purged, cutoff }, `purged ${purged} ${p.what} before ${cutoff} (${p.setting})`);
    return purged;
  } catch (err) {
    logger.warn({ event: `${p.event.replace('purged', 'purge')}_failed`, err }, `could not purge old ${p.what}; the next sync tries again`);
    return 0;
  }
}

/**
 * Once a run's result is delivered: copies the WAL into the mirror file
 * (the run's writer leaves that out of its COMMIT, db/mirror-store.ts).
 * Readers are never blocked by it; one holding an old snapshot only leaves
 * part of the WAL for the next checkpoint, which is logged.
 *
 * A checkpoint that fails (the file cannot grow: a full disk) is logged at
 * error and recorded beside the mirror (./attempt-record.ts), so `status`
 * reports it until one succeeds; the next run retries it first
 * (retryCheckpoint). One that runs replaces any such record with its
 * figures: how many frames a reader held back, which `status` shows.
 *
 * Only after a run of ours (`outcome.ran`): a run skipped because another
 * process holds the lease has nothing to copy, and its TRUNCATE would wait
 * out the busy timeout on that process's write lock.
 *
 * Never with MIRROR_CHECKPOINTS=external: Litestream owns the checkpoints
 * (an outside TRUNCATE makes it lose its place in the WAL and upload the
 * whole mirror as a new generation). The record beside the mirror then only
 * says the run is over, so an old failure of ours is not reported forever.
 */
export function checkpointAfterSync(
  db: Db,
  logger: Logger,
  outcome: LeasedOutcome<unknown> | undefined,
  mode: CheckpointMode = 'after-sync',
): void {
  if (outcome?.ran !== true) return;
  if (mode === 'external') {
    logger.debug({ event: 'sync.checkpoint_left', mode }, 'WAL left to the external checkpointer (MIRROR_CHECKPOINTS=external)');
    if (db.name === ':memory:') return;
    try {
      recordRunCheckpointedElsewhere(db.name);
    } catch (err) {
      logger.warn({ event: 'sync.attempt_record_kept', err }, 'could not update the record beside the mirror');
    }
    return;
  }
  let r: ReturnType<typeof checkpointMirror>;
  try {
    r = checkpointMirror(db);
  } catch (err) {
    logger.error({ event: 'sync.checkpoint_failed', err }, 'WAL checkpoint failed; the next sync retries it first');
    keepFailure(db.name, 'checkpoint', db.name === ':memory:' ? err : withDatabasePath(err, db.name), logger);
    return;
  }
  if (r.busy)
    logger.warn({ event: 'sync.checkpoint', ...r }, 'WAL checkpoint incomplete: a reader held part of it; the next one copies the rest');
  else logger.info({ event: 'sync.checkpoint', ...r }, 'WAL copied into the mirror file');
  if (db.name === ':memory:') return;
  try {
    recordCheckpoint(db.name, r);
  } catch (err) {
    logger.warn({ event: 'sync.attempt_record_kept', err }, 'could not update the record beside the mirror');
  }
}

/** The mirror's WAL file size: 0 when the last checkpoint emptied it (or for an in-memory database). */
function walBytesOf(db: Db): number {
  return db.name === ':memory:' ? 0 : databaseFileSizes(db.name).walBytes;
}

/**
 * Before a run whose WAL was not empty when it began (runLeasedSync looks,
 * before the lease writes its row): copies what a failed or blocked
 * checkpoint left in it (PASSIVE: it never waits on a reader), so a failed
 * checkpoint does not grow into the next run's WAL. A failure here is
 * logged and the run goes on.
 */
function retryCheckpoint(db: Db, logger: Logger, earlierRun: boolean): void {
  try {
    const r = copyWalPassive(db);
    if (r !== undefined && r.walFrames > 0 && earlierRun) {
      logger.info(
        { event: 'sync.checkpoint_retried', walFrames: r.walFrames, copiedFrames: r.copiedFrames },
        'copied what was left in the WAL before this run',
      );
    }
  } catch (err) {
    logger.warn({ event: 'sync.checkpoint_retry_failed', err }, 'the WAL an earlier checkpoint left could not be copied; syncing anyway');
  }
}

/** Records a failure beside the mirror for `status`; if even that fails (the same full disk), says so. */
export function keepFailure(mirrorPath: string, what: AttemptFailure, err: unknown, logger: Logger): void {
  if (mirrorPath === ':memory:') return;
  try {
    recordFailedAttempt(mirrorPath, what, errorMessage(err));
  } catch (writeErr) {
    logger.error({ event: 'sync.attempt_unrecorded', err: writeErr }, 'could not record the failure beside the mirror either');
  }
}

/** Records the mirror file's loss under the running daemon beside it, for `status` (./attempt-record.ts keeps it against the old file's outcomes); if that fails, says so. */
export function keepLoss(mirrorPath: string, loss: { what: LossKind; message: string }, logger: Logger): void {
  try {
    recordMirrorLoss(mirrorPath, loss.what, loss.message);
  } catch (writeErr) {
    logger.error({ event: 'sync.attempt_unrecorded', err: writeErr }, 'could not record the loss beside the mirror');
  }
}

/**
 * Makes the failure record's file (./attempt-record.ts) before an attempt
 * opens the mirror, while there is room: a failure on a full disk can then
 * still be written into it.
 */
export function reserveRecord(mirrorPath: string, logger: Logger): void {
  if (mirrorPath === ':memory:') return;
  try {
    reserveAttemptRecord(mirrorPath);
  } catch (err) {
    logger.warn({ event: 'sync.attempt_record_unreserved', err }, 'could not make the failure record beside the mirror');
  }
}
