/**
 * Opens the daemon's database files at start-up, waiting while another
 * process holds a write lock the open needs.
 *
 * Opening usually needs no lock, but it takes one to migrate (a new file, an
 * upgrade) or to import an older audit. Another process's sync holds the
 * mirror's write lock for its whole run, which on a large first sync is
 * minutes: a start that needs the lock then fails with SQLITE_BUSY after the
 * connection's busy timeout. Exiting would only have pm2 start the daemon
 * again into the same wait, so the daemon waits here instead (the status
 * server is not up yet, so it is not ready), and says so in the log.
 */
import { retryWhileBusy } from '../../db/busy-retry.js';
import type { Db } from '../../db/open.js';
import type { Logger } from '../log.js';

/** Longer than a first sync of a large directory is expected to hold the mirror. */
export const OPEN_WAIT_BUDGET_MS = 15 * 60_000;

export function openWhenUnlocked(file: 'mirror' | 'audit', open: () => Db, logger: Logger): Promise<Db> {
  return retryWhileBusy(async () => open(), {
    budgetMs: OPEN_WAIT_BUDGET_MS,
    firstDelayMs: 200,
    maxDelayMs: 5_000,
    onRetry: ({ attempt, delayMs }) =>
      logger.warn(
        { event: 'daemon.db_locked_at_start', file, attempt, retryInMs: delayMs },
        `the ${file} file is write-locked by another process (a sync running elsewhere?); waiting to open it`,
      ),
  });
}
