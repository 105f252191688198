/**
 * Whether a scan's listing is complete, and what to read again when it is
 * not (pure: the scan asks, ./scan.ts reads the offsets it is given).
 *
 * The listing says how many users it holds (`total`); the run's ledger says
 * how many distinct users it has listed. A listing that falls short is one
 * of two things, told apart by how far its `total` moved while it was read:
 *
 * - a directory that lives during the scan. Each creation or deletion between
 *   two pages moves `total` by one, and can cost the count at most two: a
 *   user created behind the cursor is not read and pushes one already read
 *   onto the next page (a repeat); one created past the plan's end is not
 *   read; a deletion behind the cursor lets a user slip back unread, but the
 *   deleted user was listed and `total` fell by one with it. So a shortfall
 *   up to twice the total's movement (the sum of its steps from page to page
 *   as they arrived) is life, and the run completes: the users it skipped
 *   are deletion candidates found alive by the check, and new ones are
 *   listed by the next run.
 * - an unstable listing: pages that repeat others, an order that changes
 *   between pages. Its `total` does not move, yet users are missing.
 *
 * A user listed twice within one page is neither: one answer is one read,
 * so that is the service listing the user twice (an identity conflict when
 * under another client_user_id, reported as such), and it counts as listed;
 * so does a record without a readable user_id (rejected, and reported).
 *
 * A short listing is read again, within a budget of twice the pass's pages:
 * first the pages that repeated users already listed, and the pages past
 * the plan's end up to the newest `total` (a page that repeated another by
 * accident comes right when asked again; a directory that grew gets its
 * tail); then the whole listing again, and again while that still finds new
 * users (an order that changed once is read whole in its new order). It
 * stops as soon as the count is explained, when a whole reading finds no
 * user it had not listed, or when the budget is spent; then the run is `partial`,
 * names the shortfall, and deletes nothing (a deletion needs a complete
 * listing).
 *
 * Not explained, and so re-read and possibly `partial`: creations and
 * deletions that cancel out between the same two pages (the total does not
 * move) while landing behind the cursor. The stand-in's churn appends and
 * deletes at random, which never repeats a user, so its living directory
 * completes; the live service's order is undocumented.
 */

const COUNT = new Intl.NumberFormat('en-US');

/** What the listing and the ledger say after a pass or a round of re-reads. */
export interface ListingTally {
  /** Distinct users the run has listed (its ledger's count). */
  distinct: number;
  /** `total` on the newest page: what the listing last said it holds. */
  total: number;
  /** Σ |Δtotal| from page to page as they arrived: the creations and deletions the listing showed. */
  movement: number;
  /** Records that named no user their page did not name already (a user twice in one page, no readable user_id): counted as listed. */
  notDistinct: number;
  /** Pages that failed after their retries: the run is partial for those, and nothing is re-read. */
  pageFailures: number;
}

export interface Completeness {
  complete: boolean;
  /** Users the listing holds that the run did not list. */
  shortfall: number;
  /** How many of them the listing's movement, and its records that name no new user within their page, explain. */
  allowance: number;
}

export function completeness(t: ListingTally): Completeness {
  const shortfall = Math.max(0, t.total - t.distinct);
  const allowance = 2 * t.movement + t.notDistinct;
  return { complete: shortfall <= allowance, shortfall, allowance };
}

/** Where the pass stands, for planning re-reads. */
export interface PassShape {
  /** The page step (the service's limit as echoed). */
  step: number;
  /** `total` on the first page: the plan read offsets below it. */
  planTotal: number;
  /** Pages the pass read: the budget is twice that. */
  pagesRead: number;
  /** Offsets of the pages, this far, that listed users already listed in this run. */
  repeatedAt: readonly number[];
}

/** Re-reading so far. */
export interface RereadState {
  rounds: number;
  pages: number;
  /** Distinct users the last round added; undefined before the first. */
  lastGain: number | undefined;
  /** Whether the last round read the whole listing (not only the pages that repeated and the tail). */
  lastWhole: boolean;
}

export const NO_REREADS: Readonly<RereadState> = Object.freeze({ rounds: 0, pages: 0, lastGain: undefined, lastWhole: false });

export type ListingStep =
  | { kind: 'complete' }
  | { kind: 'reread'; offsets: number[]; whole: boolean }
  /** `reason` names the shortfall, for the run's row and `status`. */
  | { kind: 'incomplete'; reason: string };

/** Most pages one run re-reads: twice the pass's, so that a run costs at most three passes. */
function rereadBudget(shape: PassShape): number {
  return 2 * Math.max(1, shape.pagesRead);
}

/** The next step for a listing: done, read these offsets again, or give up naming the shortfall. */
export function nextListingStep(t: ListingTally, shape: PassShape, done: RereadState): ListingStep {
  const c = completeness(t);
  if (c.complete) return { kind: 'complete' };
  const incomplete = (why: string): ListingStep => ({ kind: 'incomplete', reason: shortfallReason(t, c, done, why) });
  if (t.pageFailures > 0) return incomplete('not re-read: pages failed');
  // Only a whole reading that found nobody new ends it: pages that repeated, read again in an order that changed once, repeat again.
  if (done.lastGain === 0 && done.lastWhole) return incomplete('reading the whole listing again found no user it had not listed');
  const left = rereadBudget(shape) - done.pages;
  if (left <= 0) return incomplete('the re-read budget (twice the pass) is spent');
  const targeted = done.rounds === 0 ? targetedOffsets(t, shape) : [];
  if (targeted.length > 0) return { kind: 'reread', offsets: targeted.slice(0, left), whole: false };
  return { kind: 'reread', offsets: everyOffset(Math.max(t.total, shape.planTotal), shape.step).slice(0, left), whole: true };
}

/** The pages that repeated users, and those past the plan's end up to the newest total: cheap, and what a one-off repeat or growth needs. */
function targetedOffsets(t: ListingTally, shape: PassShape): number[] {
  const step = Math.max(1, shape.step);
  const tail: number[] = [];
  for (let at = Math.ceil(Math.max(0, shape.planTotal) / step) * step; at < t.total; at += step) tail.push(at);
  return [...new Set([...shape.repeatedAt, ...tail])].sort((a, b) => a - b);
}

function everyOffset(total: number, step: number): number[] {
  const out: number[] = [];
  for (let at = 0; at === 0 || at < total; at += Math.max(1, step)) out.push(at);
  return out;
}

function shortfallReason(t: ListingTally, c: Completeness, done: RereadState, why: string): string {
  const explained =
    c.allowance === 0 ? 'its total did not move to explain it' : `more than the ${COUNT.format(c.allowance)} its total's movement explains`;
  const rereads = done.pages === 0 ? 'nothing re-read' : `re-read ${COUNT.format(done.pages)} page(s) in ${done.rounds} round(s)`;
  return (
    `listing incomplete: ${COUNT.format(t.distinct)} distinct users of ${COUNT.format(t.total)} listed ` +
    `(${COUNT.format(c.shortfall)} short, ${explained}; ${rereads}; ${why}): nothing was deleted`
  );
}

/**
 * The steps of one run's listing, kept: asked after the pass and after each
 * round of re-reads (./scan.ts), it counts what each round found and gives
 * the last verdict. Pure, like the rest of this file.
 */
export class ListingJudge {
  private done: RereadState = NO_REREADS;
  private distinctBefore: number | undefined;
  /** The pass's own pages, fixed at the first step: re-reads do not raise their own budget. */
  private pagesRead: number | undefined;
  private last: ListingStep = { kind: 'complete' };

  step(t: ListingTally, shape: PassShape): ListingStep {
    if (this.distinctBefore !== undefined) this.done = { ...this.done, lastGain: t.distinct - this.distinctBefore };
    this.pagesRead ??= shape.pagesRead;
    const next = nextListingStep(t, { ...shape, pagesRead: this.pagesRead }, this.done);
    if (next.kind === 'reread') {
      this.done = {
        rounds: this.done.rounds + 1,
        pages: this.done.pages + next.offsets.length,
        lastGain: undefined,
        lastWhole: next.whole,
      };
      this.distinctBefore = t.distinct;
    }
    this.last = next;
    return next;
  }

  /** The listing's verdict after the last step: `incomplete` names the shortfall. */
  get verdict(): Exclude<ListingStep, { kind: 'reread' }> {
    return this.last.kind === 'reread' ? { kind: 'complete' } : this.last;
  }
}
