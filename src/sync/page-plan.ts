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
import { MAX_PAGE_LIMIT } from '../service/client.js';

/** Always the service maximum: fewer round trips, and every page is the same size. */
export const PAGE_LIMIT = MAX_PAGE_LIMIT;

export class PagePlan {
  private nextOffset: number;
  private end: number;

  constructor(
    readonly total: number,
    readonly limit: number = PAGE_LIMIT,
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
export function pagesFor(total: number, limit: number = PAGE_LIMIT): number {
  return Math.max(1, Math.ceil(Math.max(0, total) / limit));
}
