/**
 * One pass over the directory: given the first page (which fixed `total`),
 * fetch the remaining pages with `concurrency` fetchers and write each page
 * into the run's open transaction the moment it arrives, in whatever order,
 * while the other requests are in flight (each fetcher's next one included).
 * Memory is bounded by the pages in flight and those waiting to be written;
 * the directory itself only ever accumulates in SQLite.
 *
 * A page that still fails after its retries is counted and skipped: the pass
 * goes on, because the users on other pages are still worth staging. When
 * `concurrency` pages (at least 3) in a row fail that way with no success in
 * between, the service is taken to be down and the pass stops planning new
 * pages instead of walking every remaining page through its full retry
 * budget.
 *
 * A page refused with 401/403 is not such a failure: the key is refused, so
 * every page would be. It stops the pass and is rethrown (see retry.ts).
 */
import type { RunWriter } from './run-writer.js';
import { callWithRetries, refusalOf, type RetryOptions, shareSignal } from '../service/retry.js';
import type { RecordPage } from '../service/client.js';
import type { DirectorySource } from './source.js';
import { MAX_PAGE_LIMIT } from '../service/schemas.js';

type PageStager = Pick<RunWriter, 'stagePage'>;

interface PageFailure {
  offset: number;
  error: unknown;
}

export interface PassResult {
  totalAtStart: number;
  /** `total` on the last page to arrive: with totalAtStart, shows the directory moving under the scan. */
  totalAtEnd: number;
  /** The lowest `total` any page reported: a listing that collapses mid-scan (deletions.ts holds its deletions). */
  totalLowest: number;
  /** Σ |Δtotal| from page to page as they arrived: the creations and deletions the listing showed (./listing-check.ts). */
  movement: number;
  /** The page step the pass read by (the service's echoed limit). */
  step: number;
  /** Records that named no user their page did not name already: a user_id twice in one page, or none readable (./listing-check.ts). */
  notDistinct: number;
  /** Offsets of pages that listed users already listed in this run (the first few thousand): what a re-read tries first. */
  repeatedAt: number[];
  /** Pages asked for again because the listing fell short (./listing-check.ts), and in how many rounds. */
  rereadPages: number;
  rereadRounds: number;
  /** Pages that carried more records than the limit asked for: kept (each record is a listing), counted, logged. */
  oversizePages: number;
  /** The first few of them, for the log: offset and record count. */
  oversize: Array<{ offset: number; records: number }>;
  /** Pages fetched and staged, the first included. */
  pagesDone: number;
  pageFailures: number;
  /** The first few failures, for the reason and the log. */
  failures: PageFailure[];
  /** Valid records staged. */
  seen: number;
  duplicates: number;
  rejected: number;
  /** True when the pass stopped early because the service looked down. */
  abandoned: boolean;
  /** Page envelope keys the sync does not use (new upstream fields): logged once per run. */
  unknownEnvelopeKeys: Set<string>;
}

interface PassProgress {
  pagesDone: number;
  pagesPlanned: number;
  usersSeen: number;
}

export interface PassOptions {
  source: DirectorySource;
  writer: PageStager;
  runId: number;
  /** Page 0, already fetched: its total and echoed limit fix the plan. */
  firstPage: RecordPage;
  concurrency: number;
  limit: number;
  retry: RetryOptions;
  /** Largest user record stored (SYNC_MAX_RECORD_BYTES); see page-decode.ts. */
  maxRecordBytes?: number;
  onPage?: (progress: PassProgress) => void;
  /** Pages asked for beside page 0, before its total was known (Prefetch); the pass takes those its plan reaches. */
  prefetch?: Prefetch;
  /**
   * Asked once the pass is read, and after each round of re-reads: the offsets to read again (the listing fell
   * short, ./listing-check.ts), or undefined when it is done. Pages read again are staged like any other.
   */
  reread?: (result: PassResult) => readonly number[] | undefined;
}

/** What the workers take offsets from: the pass's PagePlan, or a list of offsets to read again. */
interface OffsetSource {
  next(): number | undefined;
  emptyAt(offset: number): void;
  stop(): void;
}

/** Offsets to read again, in order; an empty page ends the list there, as in a PagePlan. */
class OffsetList implements OffsetSource {
  private at = 0;
  private end: number;

  constructor(private readonly offsets: readonly number[]) {
    this.end = Number.POSITIVE_INFINITY;
  }

  next(): number | undefined {
    const offset = this.offsets[this.at];
    if (offset === undefined || offset >= this.end) return undefined;
    this.at++;
    return offset;
  }

  emptyAt(offset: number): void {
    // Offset 0 is always worth reading: it is where a listing's total comes from.
    if (offset > 0) this.end = Math.min(this.end, offset);
  }

  stop(): void {
    this.end = 0;
  }
}

/** A page's request, settled: the page, or why it failed. Never rejects. */
export type Fetched = { offset: number; page: RecordPage } | { offset: number; error: unknown };

/**
 * Pages asked for at once with page 0, planned from the last run's total,
 * so that a re-sync starts `concurrency` wide instead of waiting a round
 * trip for page 0 alone. Page 0 verifies the plan: the pass uses a page only
 * where its plan asks for that offset with that limit; the others (a
 * directory that shrank, a service that caps its pages) are aborted and
 * dropped.
 */
export class Prefetch {
  private readonly pages = new Map<number, Promise<Fetched>>();
  private readonly stop = new AbortController();

  constructor(source: DirectorySource, offsets: readonly number[], limit: number, retry: RetryOptions) {
    const signal = retry.signal === undefined ? this.stop.signal : AbortSignal.any([retry.signal, this.stop.signal]);
    // One attempt each: a service that is down gets one more request per page, not their retries;
    // a page whose attempt failed is asked for again, with retries, by the pass (take).
    for (const offset of offsets) this.pages.set(offset, fetchWithRetries(source, offset, limit, { ...retry, attempts: 1, signal }));
  }

  /** The request for `offset`, taken: undefined when none was made. */
  take(offset: number): Promise<Fetched> | undefined {
    const page = this.pages.get(offset);
    this.pages.delete(offset);
    return page;
  }

  /** Aborts what was not taken and waits for it: nothing outlives the run. */
  async drop(): Promise<void> {
    this.stop.abort();
    await Promise.all(this.pages.values());
    this.pages.clear();
  }
}

/** The offsets to ask for beside page 0, from the last run's total: up to `concurrency - 1` pages. */
export function prefetchOffsets(lastTotal: number | undefined, concurrency: number, limit: number): number[] {
  const out: number[] = [];
  for (let k = 1; lastTotal !== undefined && k < concurrency && k * limit < lastTotal; k++) out.push(k * limit);
  return out;
}

function fetchWithRetries(source: DirectorySource, offset: number, limit: number, retry: RetryOptions): Promise<Fetched> {
  return callWithRetries(`offset ${offset}`, (sig) => source.listUserRecords({ offset, limit }, sig), retry).then(
    (page) => ({ offset, page }),
    (error: unknown) => ({ offset, error }),
  );
}

const KEPT_FAILURES = 5;
/** Offsets of repeating pages kept for a re-read: a listing that repeats on more pages is read whole again anyway. */
const KEPT_REPEATED_AT = 4_096;

export async function scanPass(options: PassOptions): Promise<PassResult> {
  const { source, writer, runId, firstPage, limit } = options;
  // A service that caps pages below what we ask says so in the echoed limit; stepping
  // by our own limit would then skip users on every page.
  const step = firstPage.limit > 0 && firstPage.limit < limit ? firstPage.limit : limit;
  const pagePlan = new PagePlan(firstPage.total, step);
  let plan: OffsetSource = pagePlan;
  const result: PassResult = {
    totalAtStart: firstPage.total,
    totalAtEnd: firstPage.total,
    totalLowest: firstPage.total,
    movement: 0,
    step,
    notDistinct: 0,
    repeatedAt: [],
    rereadPages: 0,
    rereadRounds: 0,
    oversizePages: 0,
    oversize: [],
    pagesDone: 0,
    pageFailures: 0,
    failures: [],
    seen: 0,
    duplicates: 0,
    rejected: 0,
    abandoned: false,
    unknownEnvelopeKeys: new Set(),
  };
  let pagesPlanned = pagePlan.plannedPages + 1;
  const abandonAfter = Math.max(3, options.concurrency);
  let failureStreak = 0;

  const stage = (page: RecordPage, offset: number): void => {
    if (page.spans.length === 0) plan.emptyAt(offset);
    const counts = writer.stagePage(runId, page, offset, options.maxRecordBytes);
    result.pagesDone++;
    result.movement += Math.abs(page.total - result.totalAtEnd);
    result.totalAtEnd = page.total;
    // Counted on the pass's own pages: a page read again repeats its users again, the same records.
    if (result.rereadRounds === 0) result.notDistinct += counts.notDistinct;
    if (counts.fresh < counts.seen && result.repeatedAt.length < KEPT_REPEATED_AT) result.repeatedAt.push(offset);
    result.totalLowest = Math.min(result.totalLowest, page.total);
    // More than asked for, or than the page's own echoed limit says it holds.
    if (page.spans.length > (page.limit > 0 ? Math.min(page.limit, limit) : limit)) {
      result.oversizePages++;
      if (result.oversize.length < KEPT_FAILURES) result.oversize.push({ offset, records: page.spans.length });
    }
    for (const key of page.unknownKeys) result.unknownEnvelopeKeys.add(key);
    result.seen += counts.seen;
    result.duplicates += counts.duplicates;
    result.rejected += counts.rejected;
    options.onPage?.({ pagesDone: result.pagesDone, pagesPlanned, usersSeen: result.seen });
  };

  stage(firstPage, 0);

  // Workers never reject: an unexpected error (the database, an abort, a refused key) stops
  // the others and is rethrown once all of them have settled, so nothing is
  // still staging when the caller moves on to discard or publish.
  const stop = new AbortController();
  const signal = options.retry.signal === undefined ? stop.signal : AbortSignal.any([options.retry.signal, stop.signal]);
  shareSignal(signal, options.concurrency);
  const retry: RetryOptions = { ...options.retry, signal };
  let fatal: { error: unknown } | undefined;

  // Prefetched pages count only if the plan steps by the limit they were asked with.
  let prefetch = step === limit ? options.prefetch : undefined;
  const request = (): Promise<Fetched> | undefined => {
    const offset = signal.aborted ? undefined : plan.next();
    if (offset === undefined) return undefined;
    const taken = prefetch?.take(offset);
    if (taken === undefined) return fetchWithRetries(source, offset, limit, retry);
    return taken.then((got) =>
      'error' in got && refusalOf(got.error) === undefined && !signal.aborted ? fetchWithRetries(source, offset, limit, retry) : got,
    );
  };

  /** Stages a page or counts its failure; false when the pass must stop (a refused key, a database error). */
  const settle = (got: Fetched): boolean => {
    if ('error' in got) {
      const { offset, error } = got;
      if (refusalOf(error) !== undefined) {
        fatal ??= { error };
        stop.abort(error);
        return false;
      }
      result.pageFailures++;
      if (result.failures.length < KEPT_FAILURES) result.failures.push({ offset, error });
      if (++failureStreak >= abandonAfter) {
        result.abandoned = true;
        plan.stop();
      }
      return true;
    }
    failureStreak = 0;
    try {
      stage(got.page, got.offset);
      return true;
    } catch (error) {
      fatal ??= { error };
      stop.abort(error);
      return false;
    }
  };

  // Each worker asks for its next page before it stages the one that came: with the service
  // 100 ms away, staging (tens of ms for 500 new users) would otherwise add to every round
  // trip. Requests in flight stay `concurrency`. Not after a failure or an empty page: those
  // may end the plan, and the next request waits to see whether they did.
  const worker = async (): Promise<void> => {
    let next = request();
    while (next !== undefined) {
      const got = await next;
      next = 'page' in got && got.page.spans.length > 0 ? request() : undefined;
      // Staging blocks the event loop: let the request reach its socket first.
      if (next !== undefined) await new Promise((resolve) => setImmediate(resolve));
      if (signal.aborted || !settle(got)) break;
      next ??= request();
    }
    // A request issued before the pass stopped: aborted with it, awaited so that nothing outlives the pass.
    await next;
  };

  const readAll = async (): Promise<void> => {
    await Promise.all(Array.from({ length: Math.max(1, options.concurrency) }, () => worker()));
    if (fatal !== undefined) throw fatal.error;
    options.retry.signal?.throwIfAborted();
  };

  try {
    await readAll();
  } finally {
    await options.prefetch?.drop();
  }
  prefetch = undefined;
  for (let offsets = options.reread?.(result); offsets !== undefined && offsets.length > 0; offsets = options.reread?.(result)) {
    plan = new OffsetList(offsets);
    pagesPlanned += offsets.length;
    result.rereadPages += offsets.length;
    result.rereadRounds++;
    failureStreak = 0;
    await readAll();
  }
  return result;
}

/**
 * Which page to ask for next. Pure: the scan asks `next()` from several
 * concurrent fetchers and reports empty pages back; the plan never touches
 * the network.
 *
 * The first page (offset 0) is fetched on its own because it is the only way
 * to learn `total`; this plan covers the pages after it. The list has no
 * documented order, so the plan is fixed at `total` as seen at the start:
 * users added during the scan show up as drift (total changed), not as an
 * ever-growing plan.
 */
export class PagePlan {
  private nextOffset: number;
  private end: number;

  constructor(
    readonly total: number,
    // Always the service maximum: fewer round trips, and every page is the same size.
    readonly limit: number = MAX_PAGE_LIMIT,
  ) {
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`limit must be a positive integer, got ${limit}`);
    this.nextOffset = limit;
    this.end = Math.max(0, total);
  }

  /** The next offset to fetch, or undefined when the plan is exhausted. */
  next(): number | undefined {
    if (this.nextOffset >= this.end) return undefined;
    const offset = this.nextOffset;
    this.nextOffset += this.limit;
    return offset;
  }

  /**
   * An empty page at `offset` means the directory ends there (it shrank
   * during the scan): nothing at or beyond it is worth asking for.
   */
  emptyAt(offset: number): void {
    this.end = Math.min(this.end, offset);
  }

  /** Hands out nothing more: the scan gave up on the rest. */
  stop(): void {
    this.end = 0;
  }

  /** Pages the plan expects after the first, for progress and ETA. */
  get plannedPages(): number {
    return pagesFor(this.total, this.limit) - 1;
  }
}

/** Pages needed to cover `total` users, counting the first; at least one (offset 0 is always read). */
export function pagesFor(total: number, limit: number = MAX_PAGE_LIMIT): number {
  return Math.max(1, Math.ceil(Math.max(0, total) / limit));
}
