/**
 * Complete means complete (src/sync/listing-check.ts): a listing whose
 * distinct users fall short of its total by more than the total's movement
 * explains is read again, and if still short is never called complete.
 * Pure: no I/O.
 */
import { describe, expect, it } from 'vitest';
import { completeness, ListingJudge, nextListingStep, NO_REREADS, type PassShape } from '../src/sync/listing-check.js';

const shape = (over: Partial<PassShape> = {}): PassShape => ({ step: 500, planTotal: 2_000, pagesRead: 4, repeatedAt: [], ...over });

describe('completeness', () => {
  it('a listing whose distinct users reach its total is complete', () => {
    expect(completeness({ distinct: 2_000, total: 2_000, movement: 0, notDistinct: 0, pageFailures: 0 })).toEqual({
      complete: true,
      shortfall: 0,
      allowance: 0,
    });
    expect(completeness({ distinct: 2_010, total: 2_000, movement: 0, notDistinct: 0, pageFailures: 0 }).complete).toBe(true);
  });

  it('a page repeated, the total still: short, and nothing explains it', () => {
    expect(completeness({ distinct: 1_500, total: 2_000, movement: 0, notDistinct: 0, pageFailures: 0 })).toEqual({
      complete: false,
      shortfall: 500,
      allowance: 0,
    });
  });

  it('a living directory: each step of the total explains two missing users, no more', () => {
    // 15 users created behind the cursor: 15 not read, 15 read twice.
    expect(completeness({ distinct: 1_985, total: 2_015, movement: 15, notDistinct: 0, pageFailures: 0 }).complete).toBe(true);
    expect(completeness({ distinct: 1_984, total: 2_015, movement: 15, notDistinct: 0, pageFailures: 0 }).complete).toBe(false);
  });

  it('a user listed twice within one page is the service listing it twice: counted as listed', () => {
    expect(completeness({ distinct: 61, total: 62, movement: 0, notDistinct: 1, pageFailures: 0 }).complete).toBe(true);
  });
});

describe('nextListingStep', () => {
  it('reads nothing again when the listing is complete', () => {
    expect(nextListingStep({ distinct: 2_000, total: 2_000, movement: 0, notDistinct: 0, pageFailures: 0 }, shape(), NO_REREADS)).toEqual({
      kind: 'complete',
    });
  });

  it('rereads first the pages that repeated, and the tail past the plan up to the newest total', () => {
    const t = { distinct: 1_500, total: 2_600, movement: 0, notDistinct: 0, pageFailures: 0 };
    expect(nextListingStep(t, shape({ repeatedAt: [1_000, 500] }), NO_REREADS)).toEqual({
      kind: 'reread',
      offsets: [500, 1_000, 2_000, 2_500],
      whole: false,
    });
  });

  it('then rereads the whole listing while a round finds new users, within twice the pass', () => {
    const t = { distinct: 1_500, total: 2_000, movement: 0, notDistinct: 0, pageFailures: 0 };
    const whole = { kind: 'reread', offsets: [0, 500, 1_000, 1_500], whole: true };
    expect(nextListingStep(t, shape(), NO_REREADS)).toEqual(whole);
    expect(nextListingStep(t, shape(), { rounds: 1, pages: 1, lastGain: 20, lastWhole: false })).toEqual(whole);
    // The pages that repeated, read again, repeat again (an order that changed once): the whole listing still comes.
    expect(nextListingStep(t, shape(), { rounds: 1, pages: 1, lastGain: 0, lastWhole: false })).toEqual(whole);
    expect(nextListingStep(t, shape(), { rounds: 2, pages: 5, lastGain: 20, lastWhole: true })).toEqual({
      ...whole,
      offsets: [0, 500, 1_000],
    });
  });

  it('gives up naming the shortfall: a whole reading that found nobody, a spent budget, failed pages', () => {
    const t = { distinct: 1_500, total: 2_000, movement: 0, notDistinct: 0, pageFailures: 0 };
    const noGain = nextListingStep(t, shape(), { rounds: 2, pages: 5, lastGain: 0, lastWhole: true });
    expect(noGain).toEqual({
      kind: 'incomplete',
      reason:
        'listing incomplete: 1,500 distinct users of 2,000 listed (500 short, its total did not move to explain it; ' +
        're-read 5 page(s) in 2 round(s); reading the whole listing again found no user it had not listed): nothing was deleted',
    });
    expect(nextListingStep(t, shape(), { rounds: 3, pages: 8, lastGain: 3, lastWhole: true })).toMatchObject({
      kind: 'incomplete',
      reason: expect.stringContaining('the re-read budget (twice the pass) is spent'),
    });
    expect(nextListingStep({ ...t, pageFailures: 1 }, shape(), NO_REREADS)).toMatchObject({
      kind: 'incomplete',
      reason: expect.stringContaining('nothing re-read; not re-read: pages failed'),
    });
  });
});

describe('ListingJudge', () => {
  it('ends incomplete when a page repeats every time: rereads that page, then the whole listing, and finds no new user', () => {
    const judge = new ListingJudge();
    const t = { distinct: 1_500, total: 2_000, movement: 0, notDistinct: 0, pageFailures: 0 };
    expect(judge.step(t, shape({ repeatedAt: [500] }))).toEqual({ kind: 'reread', offsets: [500], whole: false });
    expect(judge.step(t, shape({ pagesRead: 5, repeatedAt: [500, 500] }))).toMatchObject({ kind: 'reread', whole: true });
    expect(judge.step(t, shape({ pagesRead: 9, repeatedAt: [500, 500, 500] }))).toMatchObject({ kind: 'incomplete' });
    expect(judge.verdict).toMatchObject({
      kind: 'incomplete',
      reason: expect.stringMatching(/^listing incomplete: 1,500 distinct users of 2,000 listed/),
    });
  });

  it('a page that repeated once: its re-read makes the listing whole', () => {
    const judge = new ListingJudge();
    expect(
      judge.step({ distinct: 1_500, total: 2_000, movement: 0, notDistinct: 0, pageFailures: 0 }, shape({ repeatedAt: [500] })).kind,
    ).toBe('reread');
    expect(judge.step({ distinct: 2_000, total: 2_000, movement: 0, notDistinct: 0, pageFailures: 0 }, shape({ pagesRead: 5 }))).toEqual({
      kind: 'complete',
    });
    expect(judge.verdict).toEqual({ kind: 'complete' });
  });

  it('the budget is twice the pass itself, not growing with the re-reads', () => {
    const judge = new ListingJudge();
    let pages = 4;
    let distinct = 1_000;
    const offsets: number[] = [];
    for (
      let step = judge.step({ distinct, total: 2_000, movement: 0, notDistinct: 0, pageFailures: 0 }, shape());
      step.kind === 'reread';
    ) {
      offsets.push(...step.offsets);
      pages += step.offsets.length;
      distinct += 10;
      step = judge.step({ distinct, total: 2_000, movement: 0, notDistinct: 0, pageFailures: 0 }, shape({ pagesRead: pages }));
    }
    expect(offsets).toHaveLength(8);
    expect(judge.verdict).toMatchObject({ kind: 'incomplete', reason: expect.stringContaining('re-read 8 page(s) in 2 round(s)') });
  });
});
