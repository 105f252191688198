/**
 * One sync run: scan the service's directory, writing each page's changed
 * users into the run's open write transaction as the page arrives (the
 * SQLite work overlaps the requests in flight), confirm upstream which
 * missing users are really gone, apply those deletions and COMMIT (publish),
 * record the run. Readers see the previous mirror until the COMMIT.
 *
 * Outcomes, and why:
 * - `failed`, nothing published: the first page could not be fetched (the
 *   service is down: nothing is known), the service refused the key on any
 *   request (401/403: never retried, and no other page would succeed), the
 *   run was aborted or passed its deadline (SYNC_MAX_DURATION_MS), or
 *   something unexpected broke (the database). The run's transaction is
 *   rolled back, the mirror is exactly as before.
 * - `partial`, creates and updates published, nothing deleted: pages failed
 *   (after their retries, or at once when not retryable: a page larger than
 *   SYNC_MAX_PAGE_BYTES, a malformed body), or the mass-delete breaker held (deletions.ts). Every
 *   record we did receive is a true fact as of the moment it was read, so
 *   withholding it would only make the mirror staler.
 * - `succeeded`: every page was read, and every deletion candidate was
 *   settled (confirmed gone and deleted, or found alive and kept) or left
 *   for a later run (beyond SYNC_MAX_VERIFY, or its resolve kept failing).
 *
 * There is one pass and no re-scan. A listing that moves under the scan can
 * only skip or repeat users: a repeat is harmless (the latest listing wins),
 * a skipped user is a candidate that the check finds alive, and a new user
 * it skipped is listed by the next run. A second pass would find nothing the
 * check does not, at the cost of reading the whole directory again.
 *
 * The run deadline exists because no single timeout bounds a run: each
 * request has its own, each page its retry budget, but a service that
 * answers every page slowly, just inside them, could still keep a run (and
 * the sync lease) for a day. The default, 2 hours, is far beyond a healthy
 * run: a million users are 2,000 pages, 25 minutes even at 3 s a page with
 * SYNC_CONCURRENCY 4 (under 2 minutes against the local stand-in).
 */
import { setMaxListeners } from 'node:events';
import { NO_CANDIDATES, type CandidateCounts } from '../../db/sync-runs.js';
import type { IdentityConflict } from '../../db/identity-conflicts.js';
import type { RunWriter } from './run-writer.js';
import type { RecordPage } from '../service/client.js';
import { type BackoffPolicy, callWithRetries, DEFAULT_BACKOFF, refusalOf, type RetryOptions } from '../service/retry.js';
import { logError, silentLogger, type Logger } from '../runtime/log.js';
import { errorMessage } from '../runtime/errors.js';
import { startDeadline } from '../runtime/deadline.js';
import { type DirectorySource, type PassResult, Prefetch, prefetchOffsets, scanPass } from './scan.js';
import { MAX_PAGE_LIMIT } from '../service/schemas.js';
import { checkCandidates, type DeletionCheck, type DeletionPlan, planDeletions } from './deletions.js';
import type { ProgressSnapshot } from './progress.js';

export type SyncStatus = 'succeeded' | 'partial' | 'failed';

export interface SyncOptions {
  client: DirectorySource;
  /** The mirror to write, through the run's writer (sqliteRunWriter over an open database). */
  writer: RunWriter;
  /** Requests in flight after the first page (SYNC_CONCURRENCY). */
  concurrency?: number;
  /** Deletion checks in flight (SYNC_VERIFY_CONCURRENCY): they hold the run's write transaction while they wait. */
  verifyConcurrency?: number;
  /** Largest share of active users one run may find missing and still delete (SYNC_MAX_DELETE_RATIO). */
  maxDeleteRatio?: number;
  /** Most deletion candidates checked upstream per run (SYNC_MAX_VERIFY). */
  maxVerify?: number;
  /** Attempts per page and per check, the first included (SYNC_PAGE_ATTEMPTS). */
  pageAttempts?: number;
  /** Retries go on past pageAttempts while within this of a page's first attempt (SYNC_PAGE_RETRY_BUDGET_MS); 0: attempts only. */
  pageRetryBudgetMs?: number;
  /** The run fails, publishing nothing, when still going after this (SYNC_MAX_DURATION_MS). */
  maxDurationMs?: number;
  /** Largest user record stored (SYNC_MAX_RECORD_BYTES). */
  maxRecordBytes?: number;
  backoff?: BackoffPolicy;
  logger?: Logger;
  signal?: AbortSignal;
  onProgress?: (snapshot: ProgressSnapshot) => void;
}

export interface SyncSummary extends CandidateCounts {
  runId: number;
  status: SyncStatus;
  /** Pages fetched, the first included. */
  pages: number;
  pageFailures: number;
  /** Distinct users listed. */
  usersSeen: number;
  created: number;
  updated: number;
  deleted: number;
  /** Of `deleted`: users whose client_user_id a newer record took over. */
  superseded: number;
  rejected: number;
  /** Records listed twice (the listing shifted); the later listing counts. */
  duplicates: number;
  /** Listings of this scan that disagreed on who is who; the later won (db/identity-conflicts.ts). */
  identityConflicts: number;
  /** Pages that carried more records than the limit asked for (kept). */
  oversizePages: number;
  /** The lowest `total` a page reported; far below totalAtStart, the run is `partial` (deletions.ts). */
  totalLowest: number | undefined;
  /** `total` on the first page, and on the last page to arrive; undefined when never read. */
  totalAtStart: number | undefined;
  totalAtEnd: number | undefined;
  durationMs: number;
  /** Why the run is not `succeeded`. */
  reason?: string;
}

export const SYNC_DEFAULTS = {
  concurrency: 4,
  maxDeleteRatio: 0.1,
  maxVerify: 5_000,
  verifyConcurrency: 16,
  pageAttempts: 5,
  pageRetryBudgetMs: 120_000,
  maxDurationMs: 7_200_000,
} as const;

export async function runSync(options: SyncOptions): Promise<SyncSummary> {
  const maxDurationMs = options.maxDurationMs ?? SYNC_DEFAULTS.maxDurationMs;
  const deadline = startDeadline(maxDurationMs, options.signal);
  try {
    return await runUntil({ ...options, signal: deadline.signal }, (err) => {
      if (deadline.expired) {
        return `run deadline passed: not finished within SYNC_MAX_DURATION_MS (${maxDurationMs} ms); nothing was published`;
      }
      if (options.signal?.aborted) return 'aborted';
      return refusalOf(err);
    });
  } finally {
    deadline.clear();
  }
}

/** `stopReason` names an ending that is no plain error: the deadline, an abort, a refused key. */
async function runUntil(
  options: SyncOptions & { signal: AbortSignal },
  stopReason: (err: unknown) => string | undefined,
): Promise<SyncSummary> {
  const writer = options.writer;
  const log = options.logger ?? silentLogger;
  const concurrency = options.concurrency ?? SYNC_DEFAULTS.concurrency;
  const maxDeleteRatio = options.maxDeleteRatio ?? SYNC_DEFAULTS.maxDeleteRatio;
  const maxVerify = options.maxVerify ?? SYNC_DEFAULTS.maxVerify;
  const verifyConcurrency = options.verifyConcurrency ?? SYNC_DEFAULTS.verifyConcurrency;
  const { signal } = options;
  const started = performance.now();
  // Every request in flight and every backoff timer listens on the run's signal; past 10 node warns of a leak that is not one.
  setMaxListeners(2 * Math.max(concurrency, verifyConcurrency) + 10, signal);
  const retry: RetryOptions = {
    attempts: options.pageAttempts ?? SYNC_DEFAULTS.pageAttempts,
    budgetMs: options.pageRetryBudgetMs ?? SYNC_DEFAULTS.pageRetryBudgetMs,
    backoff: options.backoff ?? DEFAULT_BACKOFF,
    signal,
    onRetry: (n) =>
      logError(
        log,
        'info',
        { event: 'sync.retry', what: n.what, attempt: n.attempt, delayMs: n.delayMs, err: n.error },
        'request failed, retrying',
      ),
  };

  // The run's row comes first, so that `status` shows a run waiting on its first page, and its duration is true.
  const runId = writer.recordRun();
  log.info({ event: 'sync.start', runId, concurrency, maxDeleteRatio, maxVerify }, 'sync started');
  // What the run has read, for its record if it fails: a failed run still says how far it got.
  const read = { pages: 0, usersSeen: 0 };
  // A re-sync asks for its first `concurrency` pages at once, planned from the last run's total
  // (page 0 then checks the plan): waiting a round trip for page 0 alone costs a far service's latency.
  const prefetch = new Prefetch(
    options.client,
    prefetchOffsets(writer.lastListedTotal(), concurrency, MAX_PAGE_LIMIT),
    MAX_PAGE_LIMIT,
    retry,
  );
  let first: RecordPage;
  try {
    first = await callWithRetries('offset 0', (sig) => options.client.listUserRecords({ offset: 0, limit: MAX_PAGE_LIMIT }, sig), retry);
  } catch (err) {
    await prefetch.drop();
    return fail(writer, log, runId, started, undefined, stopReason(err) ?? `first page failed: ${errorMessage(err)}`, read);
  }

  try {
    // A mirror that cannot be read here throws, its run already recorded failed by beginRun.
    writer.beginRun(first.total, runId);
  } catch (err) {
    await prefetch.drop();
    throw err;
  }
  try {
    // Nothing is staged yet, so every active user is still "unseen".
    const activeBefore = writer.countUnseenActive(runId);
    const scan = await scanPass({
      source: options.client,
      writer,
      runId,
      firstPage: first,
      concurrency,
      limit: MAX_PAGE_LIMIT,
      retry,
      maxRecordBytes: options.maxRecordBytes,
      prefetch,
      onPage: (p) => {
        read.pages = p.pagesDone;
        read.usersSeen = p.usersSeen;
        options.onProgress?.({ ...p, elapsedMs: performance.now() - started });
      },
    });
    logScan(log, scan);

    const candidates = writer.countUnseenActive(runId);
    const plan = planDeletions({
      pageFailures: scan.pageFailures,
      candidates,
      activeBefore,
      totalAtStart: scan.totalAtStart,
      totalLowest: scan.totalLowest,
      maxDeleteRatio,
      maxVerify,
    });
    // The checks wait on the service inside the run's transaction (a run publishes whole, deletions
    // included: test/mirror-atomicity.test.ts), so they run wider than the scan to hold it for less.
    const outcome = await settleCandidates(options.client, writer, runId, plan, candidates, { concurrency: verifyConcurrency, retry, log });
    if (!plan.verify && plan.kind === 'collapsed') {
      log.warn(
        {
          event: 'sync.total_collapsed',
          runId,
          totalAtStart: scan.totalAtStart,
          totalLowest: scan.totalLowest,
          totalAtEnd: scan.totalAtEnd,
        },
        plan.reason,
      );
    }
    const status: SyncStatus = plan.verify ? 'succeeded' : 'partial';
    const reason = plan.verify
      ? undefined
      : plan.reason + firstFailure(scan) + (scan.abandoned ? ' (scan stopped early: the service kept failing)' : '');
    // Past the deadline nothing may be published; after this line nothing waits, so nothing can pass it.
    signal.throwIfAborted();
    const { repeats, conflicts, ...published } = writer.publish(runId, { deletionsChecked: plan.verify, deletions: outcome.gone });
    // A first sync's repeat listings are found by its publish, the others' by the scan.
    if (repeats > 0) logListingMoved(log, { ...scan, duplicates: repeats });
    logConflicts(log, runId, conflicts);
    const duplicates = scan.duplicates + repeats;
    const summary: SyncSummary = {
      runId,
      status,
      pages: scan.pagesDone,
      pageFailures: scan.pageFailures,
      usersSeen: scan.seen - duplicates,
      ...published,
      rejected: scan.rejected,
      duplicates,
      identityConflicts: conflicts.count,
      oversizePages: scan.oversizePages,
      ...outcome.counts,
      totalAtStart: first.total,
      totalAtEnd: scan.totalAtEnd,
      totalLowest: scan.totalLowest,
      durationMs: Math.round(performance.now() - started),
      ...(reason === undefined ? {} : { reason }),
    };
    writer.finishRun(runId, {
      status,
      totalAtEnd: summary.totalAtEnd,
      pages: summary.pages,
      usersSeen: summary.usersSeen,
      error: reason,
      sweepSkippedReason: reason,
      created: summary.created,
      updated: summary.updated,
      deleted: summary.deleted,
      rejected: summary.rejected,
      duplicates: summary.duplicates,
      candidates: outcome.counts,
      identityConflicts: summary.identityConflicts,
      oversizePages: summary.oversizePages,
      totalLowest: summary.totalLowest,
    });
    if (status === 'succeeded') log.info({ event: 'sync.finished', ...summary }, 'sync succeeded');
    else log.warn({ event: 'sync.finished', ...summary }, `sync partial: ${reason ?? ''}`);
    return summary;
  } catch (err) {
    await prefetch.drop();
    return fail(writer, log, runId, started, first.total, stopReason(err) ?? errorMessage(err), read);
  }
}

/** Checks the candidates the plan allows, and counts what became of all of them. */
async function settleCandidates(
  source: DirectorySource,
  writer: RunWriter,
  runId: number,
  plan: DeletionPlan,
  candidates: number,
  ctx: { concurrency: number; retry: RetryOptions; log: Logger },
): Promise<{ gone: string[]; counts: CandidateCounts }> {
  if (candidates === 0) return { gone: [], counts: NO_CANDIDATES };
  if (!plan.verify) {
    return { gone: [], counts: { ...NO_CANDIDATES, candidates, deferred: candidates } };
  }
  const picked = writer.pickUnseenActive(runId, plan.check);
  const check: DeletionCheck = await checkCandidates(source, picked, ctx);
  const counts: CandidateCounts = {
    candidates,
    confirmedGone: check.gone.length,
    stillThere: check.alive,
    unverified: check.unverified,
    deferred: plan.deferred,
  };
  const level = counts.unverified > 0 ? 'warn' : 'info';
  ctx.log[level]({ event: 'sync.deletion_check', ...counts }, 'checked the users missing from the listing upstream');
  return { gone: check.gone, counts };
}

function logScan(log: Logger, scan: PassResult): void {
  for (const f of scan.failures) {
    logError(log, 'warn', { event: 'sync.page_failed', offset: f.offset, err: f.error }, 'page failed');
  }
  if (scan.abandoned) {
    log.warn({ event: 'sync.abandoned', pageFailures: scan.pageFailures }, 'pages kept failing; stopped the scan early');
  }
  if (scan.unknownEnvelopeKeys.size > 0) {
    log.info(
      { event: 'sync.unknown_envelope_keys', keys: [...scan.unknownEnvelopeKeys] },
      'the list pages carry keys this version does not use',
    );
  }
  for (const o of scan.oversize) {
    log.warn(
      { event: 'sync.oversize_page', offset: o.offset, records: o.records, limit: MAX_PAGE_LIMIT, pages: scan.oversizePages },
      'a page carried more records than the limit asked for; all were kept',
    );
  }
  if (scan.duplicates > 0 || scan.totalAtEnd !== scan.totalAtStart) logListingMoved(log, scan);
}

/** Each conflict kept, with its ids, then the count: the mirror kept the later listing (db/identity-conflicts.ts). */
function logConflicts(log: Logger, runId: number, conflicts: { count: number; kept: IdentityConflict[] }): void {
  for (const c of conflicts.kept) {
    const message =
      c.kind === 'user_id'
        ? 'one user_id listed under two client_user_ids in this scan; the later listing holds the user'
        : 'one client_user_id listed for two users in this scan; the later keeps it, the earlier is stored deleted';
    log.warn({ event: 'sync.identity_conflict', runId, ...c }, message);
  }
  if (conflicts.count > conflicts.kept.length) {
    log.warn(
      { event: 'sync.identity_conflicts', runId, count: conflicts.count, logged: conflicts.kept.length },
      'more identity conflicts in this scan than logged one by one',
    );
  }
}

function logListingMoved(log: Logger, scan: Pick<PassResult, 'duplicates' | 'totalAtStart' | 'totalAtEnd'>): void {
  log.info(
    { event: 'sync.listing_moved', duplicates: scan.duplicates, totalAtStart: scan.totalAtStart, totalAtEnd: scan.totalAtEnd },
    'the directory changed during the scan; missing users are checked before any deletion',
  );
}

/** The first failed page, so that the reason says why pages failed, not only how many. */
function firstFailure(scan: PassResult): string {
  const f = scan.failures[0];
  return f === undefined ? '' : ` (first: offset ${f.offset}: ${errorMessage(f.error)})`;
}

/** Records a failed run, with what it had read, and leaves the published mirror as it was. */
function fail(
  writer: RunWriter,
  log: Logger,
  runId: number,
  started: number,
  totalAtStart: number | undefined,
  reason: string,
  read: { pages: number; usersSeen: number },
): SyncSummary {
  // Finishing an unpublished run rolls its transaction back: nothing of it is published.
  writer.finishRun(runId, { status: 'failed', pages: read.pages, usersSeen: read.usersSeen, error: reason });
  const summary: SyncSummary = {
    runId,
    status: 'failed',
    pages: read.pages,
    pageFailures: 0,
    usersSeen: read.usersSeen,
    created: 0,
    updated: 0,
    deleted: 0,
    superseded: 0,
    rejected: 0,
    duplicates: 0,
    identityConflicts: 0,
    oversizePages: 0,
    ...NO_CANDIDATES,
    totalAtStart,
    totalAtEnd: undefined,
    totalLowest: undefined,
    durationMs: Math.round(performance.now() - started),
    reason,
  };
  log.error({ event: 'sync.finished', ...summary }, `sync failed: ${reason}`);
  return summary;
}
