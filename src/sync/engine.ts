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
 *   SYNC_MAX_PAGE_BYTES, a malformed body), the listing stayed short of its
 *   total (below), or the mass-delete breaker held (deletions.ts). Every
 *   record we did receive is a true fact as of the moment it was read, so
 *   withholding it would only make the mirror staler.
 * - `succeeded`: every page was read, the distinct users listed account for
 *   the listing's total, and every deletion candidate was
 *   settled (confirmed gone and deleted, or found alive and kept) or left
 *   for a later run (beyond SYNC_MAX_VERIFY, or its resolve kept failing).
 *
 * Complete means complete (./listing-check.ts). A listing that moves under
 * the scan skips and repeats users: a repeat is harmless (the latest listing
 * wins), a skipped user is a candidate that the check finds alive, and a new
 * user it skipped is listed by the next run. But a run whose distinct users
 * fall short of the listing's total by more than the total's movement
 * explains (a page that repeats another, an order that changes between
 * pages) is not a living directory: it reads again, within twice the pass's
 * pages (the pages that repeated and any tail first, then the whole listing
 * while that still finds users), and if still short ends `partial`, "listing
 * incomplete: N distinct users of M listed", deleting nothing. Measured
 * against the stand-in (2,000 users, 4 pages; test/sync-listing-complete.test.ts):
 *
 *   listing                                extra requests   outcome
 *   whole, or churn between pages          0                succeeded
 *   page 500 repeats page 0, once          1                succeeded
 *   the order changed once mid-scan        6                succeeded
 *   page 500 repeats page 0, always        5                partial
 *   a new order on every list request      8 (the budget)   partial
 *
 * The run deadline exists because no single timeout bounds a run: each
 * request has its own, each page its retry budget, but a service that
 * answers every page slowly, just inside them, could still keep a run (and
 * the sync lease) for a day. The default, 2 hours, is far beyond a healthy
 * run: a million users are 2,000 pages, 25 minutes even at 3 s a page with
 * SYNC_CONCURRENCY 4 (under 2 minutes against the local stand-in).
 *
 * This file holds the run's steps in their order; what it reads from is
 * ./source.ts, the scan ./scan.ts, a follower's feed ./follow-feed.ts, the
 * deletions ./deletions.ts, what the run logs of its scan ./run-log.ts, and
 * how it ends (its summary, row and last log line) ./run-summary.ts, which
 * is where the callers of runSync import SyncSummary from.
 */
import type { RunWriter } from './run-writer.js';
import type { RecordPage } from '../service/client.js';
import { type BackoffPolicy, callWithRetries, DEFAULT_BACKOFF, refusalOf, type RetryOptions, shareSignal } from '../service/retry.js';
import { silentLogger } from '../runtime/log.js';
import { logError } from '../runtime/log-error.js';
import { errorMessage } from '../runtime/line-text.js';
import { startDeadline } from '../runtime/deadline.js';
import { Prefetch, prefetchOffsets, scanPass } from './scan.js';
import type { DirectorySource, FeedSource } from './source.js';
import { MAX_PAGE_LIMIT } from '../service/schemas.js';
import { planDeletions, settleCandidates } from './deletions.js';
import { ListingJudge } from './listing-check.js';
import { checkLeader } from './leader-check.js';
import { LeaderPin, pinnedFeed, pinnedSource, pinTeam, UNCONFIGURED_LEADER } from './leader-pin.js';
import { followFeed } from './follow-feed.js';
import type { ProgressSnapshot } from './progress.js';
import { logCollapsed, logConflicts, logListingMoved, logScan } from './run-log.js';
import { finishFailed, finishPublished, partialReason, type SyncStatus, type SyncSummary } from './run-summary.js';
import type { Logger } from 'pino';
import { tracedPages, tracePublish } from './sync-spans.js';

/** What runSync needs: the service, the mirror's writer, and the SYNC_* settings (unset: SYNC_DEFAULTS). */
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
  /** A follower refuses a leader whose data is older than this (SYNC_LEADER_MAX_AGE_MS; ./leader-check.ts). */
  leaderMaxAgeMs?: number;
  /**
   * Follow a leader mirror's replica (SYNC_FOLLOW_LEADER): every answer pinned to the run's first leader and to one
   * team (SYNC_FOLLOW_TEAM; unset: the mirror's own), ./leader-pin.ts. Unset: the client is the service, and an
   * answer from a mirror's replica is refused.
   */
  follow?: {
    team?: string | undefined;
    /**
     * The leader's change feed, tailed after the last run's cursor instead of listing the whole leader
     * (./follow-feed.ts); null: list it every run (bench:follow compares the two). Required, and apart from
     * `client`: no wrapper of the client can drop it.
     */
    feed: FeedSource | null;
  };
  /** Largest user record stored (SYNC_MAX_RECORD_BYTES). */
  maxRecordBytes?: number;
  backoff?: BackoffPolicy;
  logger?: Logger;
  signal?: AbortSignal;
  onProgress?: (snapshot: ProgressSnapshot) => void;
}

/** The SyncOptions a caller leaves unset. */
const SYNC_DEFAULTS = {
  concurrency: 4,
  maxDeleteRatio: 0.1,
  maxVerify: 5_000,
  verifyConcurrency: 16,
  pageAttempts: 5,
  pageRetryBudgetMs: 120_000,
  maxDurationMs: 7_200_000,
  leaderMaxAgeMs: 1_800_000,
} as const;

/**
 * One sync run, within its deadline (SYNC_MAX_DURATION_MS). Every ending is a
 * summary; it throws only when the mirror cannot record the run or open its transaction.
 */
export async function runSync(options: SyncOptions): Promise<SyncSummary> {
  const maxDurationMs = options.maxDurationMs ?? SYNC_DEFAULTS.maxDurationMs;
  const deadline = startDeadline(maxDurationMs, options.signal);
  try {
    return await runUntil({ ...options, client: tracedPages(options.client), signal: deadline.signal }, (err) => {
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
  shareSignal(signal, Math.max(concurrency, verifyConcurrency));
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
  const leaderMaxAgeMs = options.leaderMaxAgeMs ?? SYNC_DEFAULTS.leaderMaxAgeMs;
  let client = options.client;
  let pin: LeaderPin | undefined;
  let feed: FeedSource | null = null;
  if (options.follow !== undefined) {
    const team = pinTeam(options.follow.team, writer.store.sources?.activeTeams() ?? []);
    if ('refused' in team) return finishFailed(writer, log, runId, started, undefined, team.refused, read);
    pin = new LeaderPin(team);
    client = pinnedSource(client, pin);
    if (options.follow.feed !== null) feed = pinnedFeed(options.follow.feed, pin);
  }
  if (pin !== undefined && feed !== null) {
    const follow = { source: feed, pin, writer, runId, retry, leaderMaxAgeMs, log, started };
    try {
      const followed = await followFeed({ ...follow, maxRecordBytes: options.maxRecordBytes });
      if (followed !== undefined) return followed;
    } catch (err) {
      return finishFailed(writer, log, runId, started, undefined, stopReason(err) ?? errorMessage(err), read);
    }
  }
  // A re-sync asks for its first `concurrency` pages at once, planned from the last run's total
  // (page 0 then checks the plan): waiting a round trip for page 0 alone costs a far service's latency.
  const prefetch = new Prefetch(client, prefetchOffsets(writer.lastListedTotal(), concurrency, MAX_PAGE_LIMIT), MAX_PAGE_LIMIT, retry);
  let first: RecordPage;
  try {
    first = await callWithRetries('offset 0', (sig) => client.listUserRecords({ offset: 0, limit: MAX_PAGE_LIMIT }, sig), retry);
  } catch (err) {
    await prefetch.drop();
    return finishFailed(writer, log, runId, started, undefined, stopReason(err) ?? `first page failed: ${errorMessage(err)}`, read);
  }

  // A follower's first page has its leader's headers (the pin refused it otherwise); the service's has none.
  const leader = first.source;
  const refused = leader && (pin === undefined ? UNCONFIGURED_LEADER : checkLeader(writer, runId, leader, leaderMaxAgeMs, log));
  if (refused !== undefined) {
    await prefetch.drop();
    return finishFailed(writer, log, runId, started, first.total, refused, read);
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
    const listing = new ListingJudge();
    const scan = await scanPass({
      source: client,
      writer,
      runId,
      firstPage: first,
      concurrency,
      limit: MAX_PAGE_LIMIT,
      retry,
      maxRecordBytes: options.maxRecordBytes,
      prefetch,
      reread: (pass) => {
        const { totalAtEnd: total, movement, notDistinct, pageFailures } = pass;
        const tally = { distinct: writer.distinctSeen(runId), total, movement, notDistinct, pageFailures };
        const step = listing.step(tally, {
          step: pass.step,
          planTotal: pass.totalAtStart,
          pagesRead: pass.pagesDone,
          repeatedAt: pass.repeatedAt,
        });
        return step.kind === 'reread' ? step.offsets : undefined;
      },
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
      incompleteListing: listing.verdict.kind === 'incomplete' ? listing.verdict.reason : undefined,
    });
    // The checks wait on the service inside the run's transaction (a run publishes whole, deletions
    // included: test/mirror-atomicity.test.ts), so they run wider than the scan to hold it for less.
    const outcome = await settleCandidates(client, writer, runId, plan, candidates, { concurrency: verifyConcurrency, retry, log });
    if (!plan.verify && plan.kind === 'collapsed') logCollapsed(log, runId, scan, plan.reason);
    const status: SyncStatus = plan.verify ? 'succeeded' : 'partial';
    const reason = plan.verify ? undefined : partialReason(plan.reason, scan);
    // Past the deadline nothing may be published; after this line nothing waits, so nothing can pass it.
    signal.throwIfAborted();
    const { repeats, conflicts, ...published } = tracePublish(() =>
      writer.publish(runId, { deletionsChecked: plan.verify, deletions: outcome.gone }),
    );
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
      rereadPages: scan.rereadPages,
      ...outcome.counts,
      totalAtStart: first.total,
      totalAtEnd: scan.totalAtEnd,
      totalLowest: scan.totalLowest,
      durationMs: Math.round(performance.now() - started),
      ...(reason === undefined ? {} : { reason }),
    };
    return finishPublished(writer, log, summary, outcome.counts, conflicts.kept);
  } catch (err) {
    await prefetch.drop();
    return finishFailed(writer, log, runId, started, first.total, stopReason(err) ?? errorMessage(err), read);
  }
}
