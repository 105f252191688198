/**
 * One sync run: scan the service's directory into staging, decide whether the
 * scan may infer deletions, publish in one short transaction, record the run.
 *
 * Outcomes, and why:
 * - `failed`, nothing published: the first page could not be fetched (the
 *   service is down or refuses us: nothing is known), the run was aborted, or
 *   something unexpected broke (the database). Staging is discarded, the
 *   mirror is exactly as before.
 * - `partial`, creates and updates published, nothing deleted: the scan got
 *   the first page but is not a complete, consistent picture (pages failed
 *   after retries, records rejected, drift that outlived the re-scans, or the
 *   mass-delete breaker). Every record we did receive is a true fact as of
 *   the moment it was read, so withholding it would only make the mirror
 *   staler; what we cannot trust is the *absence* of a user, so there is no
 *   sweep.
 * - `succeeded`: complete and consistent; published with the sweep.
 *
 * A sweep is also preceded by a check upstream of (a sample of) the users
 * it would delete (deletion-check.ts): an offset listing that shifted can
 * skip a user without moving any count, and a skipped user found alive is
 * drift like any other.
 *
 * Drift (total moved, a user on two pages, distinct count != total, a
 * candidate still alive) gets up to `driftRescans` fresh passes. A drifted
 * pass is discarded rather than published first: the next pass reads every
 * record again, newer, so publishing the old pass would only write rows the
 * next pass overwrites. If drift outlives the re-scans, the last pass is
 * published without sweep. The re-read of page 0 that measured `totalAtEnd`
 * doubles as the first page of the next pass.
 */
import { setMaxListeners } from 'node:events';
import type { Db } from '../../db/open.js';
import { MirrorWriter } from '../../db/mirror-writer.js';
import type { UserPage } from '../service/client.js';
import { DEFAULT_BACKOFF, type BackoffPolicy } from '../service/retry.js';
import { silentLogger, type Logger } from '../log.js';
import { PAGE_LIMIT } from './page-plan.js';
import type { DirectorySource } from './directory-source.js';
import { callWithRetries, type RetryOptions } from './retrying-call.js';
import { scanPass, type PassResult } from './scan.js';
import { checkDeletions } from './deletion-check.js';
import { decideSweep, type ScanFacts, type SweepDecision } from './sweep-decision.js';
import type { ProgressSnapshot } from './progress.js';

export type SyncStatus = 'succeeded' | 'partial' | 'failed';

export interface SyncOptions {
  client: DirectorySource;
  /** The mirror to write: an open database, or a writer over one. */
  db?: Db;
  writer?: MirrorWriter;
  /** Pages in flight after the first (SYNC_CONCURRENCY). */
  concurrency?: number;
  /** Largest share of active users one run may delete (SYNC_MAX_DELETE_RATIO). */
  maxDeleteRatio?: number;
  /** Attempts per page, the first included (SYNC_PAGE_ATTEMPTS). */
  pageAttempts?: number;
  /** Fresh passes allowed after a drifted one (SYNC_DRIFT_RESCANS). */
  driftRescans?: number;
  backoff?: BackoffPolicy;
  logger?: Logger;
  signal?: AbortSignal;
  onProgress?: (snapshot: ProgressSnapshot) => void;
}

export interface SyncSummary {
  runId: number;
  status: SyncStatus;
  /** Pages fetched in the pass that was published, the first included. */
  pages: number;
  pageFailures: number;
  /** Scan passes, 1 + re-scans after drift. */
  passes: number;
  /** Distinct valid users in the published pass. */
  usersSeen: number;
  created: number;
  updated: number;
  deleted: number;
  /** Of `deleted`: users whose client_user_id a newer record took over (not a sweep). */
  superseded: number;
  rejected: number;
  /** `total` when the published pass began and ended; undefined when never read. */
  totalAtStart: number | undefined;
  totalAtEnd: number | undefined;
  durationMs: number;
  /** Why the run is not `succeeded`. */
  reason?: string;
}

export const SYNC_DEFAULTS = { concurrency: 4, maxDeleteRatio: 0.1, pageAttempts: 5, driftRescans: 2 } as const;

/**
 * Deletion candidates resolved upstream before a sweep. Beyond this many the
 * check is a random sample: a shifted listing skips users at random, so a
 * sample finds them in proportion, and the number of extra requests per run
 * stays bounded whatever the deletion count.
 */
export const DELETION_CHECK_SAMPLE = 1_000;

export async function runSync(options: SyncOptions): Promise<SyncSummary> {
  const writer = options.writer ?? (options.db !== undefined ? new MirrorWriter(options.db) : undefined);
  if (writer === undefined) throw new TypeError('runSync needs `db` or `writer`');
  const log = options.logger ?? silentLogger;
  const concurrency = options.concurrency ?? SYNC_DEFAULTS.concurrency;
  const maxDeleteRatio = options.maxDeleteRatio ?? SYNC_DEFAULTS.maxDeleteRatio;
  const driftRescans = options.driftRescans ?? SYNC_DEFAULTS.driftRescans;
  const started = performance.now();
  // The deletion check puts `concurrency` requests on the caller's signal; past 10 listeners node warns of a leak that is not one.
  if (options.signal !== undefined) setMaxListeners(2 * concurrency + 10, options.signal);
  const retry: RetryOptions = {
    attempts: options.pageAttempts ?? SYNC_DEFAULTS.pageAttempts,
    backoff: options.backoff ?? DEFAULT_BACKOFF,
    signal: options.signal,
    onRetry: (n) =>
      log.info({ event: 'sync.retry', what: n.what, attempt: n.attempt, delayMs: n.delayMs, err: describe(n.error) }, 'request failed, retrying'),
  };
  const firstPageParams = { offset: 0, limit: PAGE_LIMIT };
  const firstPage = () => callWithRetries('offset 0', (signal) => options.client.listUsersPage(firstPageParams, signal), retry);

  log.info({ event: 'sync.start', concurrency, maxDeleteRatio, driftRescans }, 'sync started');
  let first: UserPage;
  try {
    first = await firstPage();
  } catch (err) {
    const runId = writer.beginRun();
    const why = options.signal?.aborted ? 'aborted' : `first page failed: ${describe(err)}`;
    return fail(writer, log, runId, started, undefined, why);
  }

  const runId = writer.beginRun(first.total);
  let totalAtStart = first.total;
  try {
    // Nothing is staged yet, so every active user is still "unseen".
    const activeBefore = writer.countUnseenActive(runId);
    let pass = 0;
    let scan: PassResult;
    let totalAtEnd: number | undefined;
    let decision: SweepDecision;
    for (;;) {
      const passStarted = performance.now();
      const currentPass = pass;
      totalAtStart = first.total;
      scan = await scanPass({
        source: options.client,
        writer,
        runId,
        firstPage: first,
        concurrency,
        limit: PAGE_LIMIT,
        retry,
        onPage: (p) => options.onProgress?.({ pass: currentPass, ...p, elapsedMs: performance.now() - passStarted }),
      });
      for (const f of scan.failures) {
        log.warn({ event: 'sync.page_failed', offset: f.offset, err: describe(f.error) }, 'page failed after retries');
      }
      // A re-read of page 0 is how drift shows up as a changed total; a scan
      // that already lost pages will not sweep anyway, so spare the service.
      let closing: UserPage | undefined;
      if (scan.pageFailures === 0) {
        try {
          closing = await firstPage();
        } catch (err) {
          if (options.signal?.aborted) throw err;
          log.warn({ event: 'sync.closing_read_failed', err: describe(err) }, 'could not re-read the first page');
        }
      }
      totalAtEnd = closing?.total;
      const facts: ScanFacts = {
        pageFailures: scan.pageFailures,
        totalAtStart: scan.totalAtStart,
        totalAtEnd,
        duplicates: scan.duplicates,
        distinctSeen: scan.seen - scan.duplicates,
        rejected: scan.rejected,
        unseenActive: writer.countUnseenActive(runId),
        activeBefore,
        maxDeleteRatio,
      };
      decision = decideSweep(facts);
      if (!decision.sweep && decision.kind === 'unverified') {
        const candidates = writer.sampleUnseenActive(runId, DELETION_CHECK_SAMPLE);
        const deletionCheck = await checkDeletions(options.client, candidates, { concurrency, retry });
        log.info({ event: 'sync.deletion_check', candidates: facts.unseenActive, ...deletionCheck }, 'checked deletion candidates upstream');
        decision = decideSweep({ ...facts, deletionCheck });
      }
      if (decision.sweep || decision.kind !== 'drift' || pass >= driftRescans || closing === undefined) break;
      log.warn({ event: 'sync.drift', pass, reason: decision.reason }, 'directory changed during the scan, scanning again');
      writer.discardStaging(runId);
      first = closing;
      pass++;
    }

    if (scan.abandoned) {
      log.warn({ event: 'sync.abandoned', pageFailures: scan.pageFailures }, 'pages kept failing; stopped the scan early');
    }
    const status: SyncStatus = decision.sweep ? 'succeeded' : 'partial';
    const reason = decision.sweep ? undefined : decision.reason + (scan.abandoned ? ' (scan stopped early: the service kept failing)' : '');
    const published = writer.publish(runId, { sweep: decision.sweep });
    const summary: SyncSummary = {
      runId,
      status,
      pages: scan.pagesDone,
      pageFailures: scan.pageFailures,
      passes: pass + 1,
      usersSeen: scan.seen - scan.duplicates,
      ...published,
      rejected: scan.rejected,
      totalAtStart,
      totalAtEnd,
      durationMs: Math.round(performance.now() - started),
      ...(reason === undefined ? {} : { reason }),
    };
    writer.finishRun(runId, {
      status,
      totalAtEnd,
      pages: summary.pages,
      usersSeen: summary.usersSeen,
      error: reason,
      sweepSkippedReason: reason,
      created: summary.created,
      updated: summary.updated,
      deleted: summary.deleted,
      rejected: summary.rejected,
      duplicates: scan.duplicates,
      rescans: pass,
    });
    if (status === 'succeeded') log.info({ event: 'sync.finished', ...summary }, 'sync succeeded');
    else log.warn({ event: 'sync.finished', ...summary }, `sync partial: ${reason ?? ''}`);
    return summary;
  } catch (err) {
    const why = options.signal?.aborted ? 'aborted' : describe(err);
    return fail(writer, log, runId, started, totalAtStart, why);
  }
}

/** Records a failed run and leaves the published mirror as it was. */
function fail(
  writer: MirrorWriter,
  log: Logger,
  runId: number,
  started: number,
  totalAtStart: number | undefined,
  reason: string,
): SyncSummary {
  // Finishing a run as failed also drops its staging: nothing of it is published.
  writer.finishRun(runId, { status: 'failed', pages: 0, usersSeen: 0, error: reason });
  const summary: SyncSummary = {
    runId,
    status: 'failed',
    pages: 0,
    pageFailures: 0,
    passes: 0,
    usersSeen: 0,
    created: 0,
    updated: 0,
    deleted: 0,
    superseded: 0,
    rejected: 0,
    totalAtStart,
    totalAtEnd: undefined,
    durationMs: Math.round(performance.now() - started),
    reason,
  };
  log.error({ event: 'sync.finished', ...summary }, `sync failed: ${reason}`);
  return summary;
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
