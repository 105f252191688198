/**
 * The pure core of the sync: page planning, the deletion plan, the retry
 * step, page splitting and progress figures. No I/O.
 */
import { describe, expect, it } from 'vitest';
import { PagePlan, pagesFor } from '../src/sync/scan.js';
import { MAX_PAGE_LIMIT } from '../src/service/schemas.js';
import { planDeletions, type ScanOutcome } from '../src/sync/deletions.js';
import { nextRetryStep, refusalOf } from '../src/service/retry.js';
import { decodePage } from './support/decode-page.js';
import { scanRecordSpans } from '../src/service/page-spans.js';
import type { RecordPage } from '../src/service/client.js';
import { verdictOf } from '../src/sync/deletions.js';
import { describeProgress, formatDuration, formatProgressLine } from '../src/sync/progress.js';
import { HttpError, NetworkError, ResponseValidationError } from '../src/service/errors.js';

function drain(plan: PagePlan): number[] {
  const out: number[] = [];
  for (let o = plan.next(); o !== undefined; o = plan.next()) out.push(o);
  return out;
}

describe('PagePlan', () => {
  it('uses the service maximum as the page size', () => {
    expect(MAX_PAGE_LIMIT).toBe(500);
  });

  it('plans every page after the first, advancing by the limit, up to total', () => {
    expect(drain(new PagePlan(1_600))).toEqual([500, 1_000, 1_500]);
    expect(drain(new PagePlan(1_500))).toEqual([500, 1_000]);
    expect(drain(new PagePlan(501))).toEqual([500]);
  });

  it('plans nothing more when the first page holds everything', () => {
    expect(drain(new PagePlan(0))).toEqual([]);
    expect(drain(new PagePlan(500))).toEqual([]);
    expect(drain(new PagePlan(3))).toEqual([]);
  });

  it('counts planned pages for progress', () => {
    expect(new PagePlan(1_600).plannedPages).toBe(3);
    expect(new PagePlan(0).plannedPages).toBe(0);
    expect(pagesFor(0)).toBe(1);
    expect(pagesFor(1_000_000)).toBe(2_000);
  });

  it('stops at an empty page: offsets at or beyond it are never handed out', () => {
    const plan = new PagePlan(5_000);
    expect(plan.next()).toBe(500);
    expect(plan.next()).toBe(1_000);
    plan.emptyAt(1_000);
    expect(plan.next()).toBeUndefined();
  });

  it('an empty page reported late does not resurrect the plan', () => {
    const plan = new PagePlan(5_000);
    plan.emptyAt(2_000);
    plan.emptyAt(4_000);
    expect(drain(plan)).toEqual([500, 1_000, 1_500]);
  });

  it('honours another limit', () => {
    expect(drain(new PagePlan(10, 3))).toEqual([3, 6, 9]);
    expect(() => new PagePlan(10, 0)).toThrow(RangeError);
  });
});

describe('planDeletions', () => {
  const clean: ScanOutcome = {
    pageFailures: 0,
    candidates: 50,
    activeBefore: 1_050,
    totalAtStart: 1_000,
    totalLowest: 1_000,
    maxDeleteRatio: 0.1,
    maxVerify: 5_000,
  };

  it('checks every candidate of a complete scan within the delete limit', () => {
    expect(planDeletions(clean)).toEqual({ verify: true, check: 50, deferred: 0 });
    expect(planDeletions({ ...clean, candidates: 0, activeBefore: 0 })).toEqual({ verify: true, check: 0, deferred: 0 });
  });

  it('checks at most maxVerify candidates and defers the rest to a later run', () => {
    expect(planDeletions({ ...clean, maxVerify: 20 })).toEqual({ verify: true, check: 20, deferred: 30 });
    expect(planDeletions({ ...clean, maxVerify: 0 })).toEqual({ verify: true, check: 0, deferred: 50 });
  });

  it('holds deletions back when a page failed', () => {
    const plan = planDeletions({ ...clean, pageFailures: 1 });
    expect(plan).toMatchObject({ verify: false, kind: 'incomplete' });
    if (!plan.verify) expect(plan.reason).toMatch(/1 page\(s\) failed/);
  });

  it('trips the mass-delete breaker above the ratio, not at it', () => {
    expect(planDeletions({ ...clean, candidates: 100, activeBefore: 1_000 })).toMatchObject({ verify: true, check: 100 });
    const plan = planDeletions({ ...clean, candidates: 101, activeBefore: 1_000 });
    expect(plan).toMatchObject({ verify: false, kind: 'mass-delete' });
    if (!plan.verify) expect(plan.reason).toMatch(/101 of 1000 .*SYNC_MAX_DELETE_RATIO/);
  });

  it('a ratio of 0 forbids any deletion, a ratio of 1 allows emptying the mirror', () => {
    expect(planDeletions({ ...clean, maxDeleteRatio: 0, candidates: 1 })).toMatchObject({ kind: 'mass-delete' });
    expect(planDeletions({ ...clean, maxDeleteRatio: 1, candidates: 1_050 })).toMatchObject({ verify: true, check: 1_050 });
  });

  it("holds deletions back when the listing's total collapses during the scan by more than the ratio", () => {
    expect(planDeletions({ ...clean, totalLowest: 900 })).toMatchObject({ verify: true, check: 50 });
    const plan = planDeletions({ ...clean, totalLowest: 0, candidates: 30 });
    expect(plan).toMatchObject({ verify: false, kind: 'collapsed' });
    if (!plan.verify) expect(plan.reason).toMatch(/total fell from 1000 to 0 .*SYNC_MAX_DELETE_RATIO/);
    // A listing that grows is no collapse.
    expect(planDeletions({ ...clean, totalAtStart: 10, totalLowest: 10 })).toMatchObject({ verify: true });
  });

  it('names a failed page before the breaker', () => {
    expect(planDeletions({ ...clean, pageFailures: 2, candidates: 1_000 })).toMatchObject({ kind: 'incomplete' });
  });
});

describe('nextRetryStep', () => {
  const policy = { baseMs: 100, maxMs: 1_000, maxRetryAfterMs: 5_000 };
  const half = () => 0.5;

  it('retries 429/503 and network errors with a growing delay', () => {
    const e503 = new HttpError(503, 'GET', '/v2/user/', undefined, undefined);
    expect(nextRetryStep(e503, 1, 5, policy, half)).toEqual({ retry: true, delayMs: 75 });
    expect(nextRetryStep(e503, 3, 5, policy, half)).toEqual({ retry: true, delayMs: 300 });
    expect(nextRetryStep(new NetworkError('ECONNRESET', 'GET', '/v2/user/'), 1, 5, policy, half)).toMatchObject({ retry: true });
  });

  it('waits at least as long as Retry-After says', () => {
    const e429 = new HttpError(429, 'GET', '/v2/user/', undefined, 2_000);
    expect(nextRetryStep(e429, 1, 5, policy, half)).toEqual({ retry: true, delayMs: 2_000 });
  });

  it('gives up when the attempts are spent', () => {
    const e503 = new HttpError(503, 'GET', '/v2/user/', undefined, undefined);
    expect(nextRetryStep(e503, 5, 5, policy, half)).toEqual({ retry: false, why: 'attempts-exhausted' });
    expect(nextRetryStep(e503, 1, 1, policy, half)).toEqual({ retry: false, why: 'attempts-exhausted' });
  });

  it('past the attempts, keeps retrying while the next attempt starts within the time budget, which caps every attempt', () => {
    const e503 = new HttpError(503, 'GET', '/v2/user/', undefined, undefined);
    expect(nextRetryStep(e503, 5, 5, policy, half, { elapsedMs: 10_000, budgetMs: 120_000 })).toEqual({ retry: true, delayMs: 750 });
    expect(nextRetryStep(e503, 40, 5, policy, half, { elapsedMs: 119_500, budgetMs: 120_000 })).toEqual({
      retry: false,
      why: 'budget-spent',
    });
    // The budget caps the attempts too: a page whose attempts each time out does not hold its run for 5 × the timeout.
    expect(nextRetryStep(e503, 2, 5, policy, half, { elapsedMs: 119_900, budgetMs: 120_000 })).toEqual({
      retry: false,
      why: 'budget-spent',
    });
    expect(nextRetryStep(e503, 2, 5, policy, half, { elapsedMs: 60_000, budgetMs: 120_000 })).toMatchObject({ retry: true });
    expect(nextRetryStep(e503, 5, 5, policy, half, { elapsedMs: 0, budgetMs: 0 })).toEqual({ retry: false, why: 'attempts-exhausted' });
    const e401 = new HttpError(401, 'GET', '/v2/user/', undefined, undefined);
    expect(nextRetryStep(e401, 1, 5, policy, half, { elapsedMs: 0, budgetMs: 120_000 })).toEqual({ retry: false, why: 'not-retryable' });
  });

  it('never retries what cannot succeed', () => {
    expect(nextRetryStep(new HttpError(401, 'GET', '/v2/user/', undefined, undefined), 1, 5)).toEqual({
      retry: false,
      why: 'not-retryable',
    });
    expect(nextRetryStep(new ResponseValidationError('users: required', 'GET', '/v2/user/'), 1, 5)).toMatchObject({
      retry: false,
    });
  });
});

describe('verdictOf', () => {
  const candidate = { user_id: '0b6f2c0e-9a51-4e43-9c3b-2a7e1c5d8f10', client_user_id: 'cu_1' };
  const user = (user_id: string) => ({ user_id, team_id: candidate.user_id, client_user_id: 'cu_1', connected_sources: [] });

  it('is alive only when the client id still names the same user', () => {
    expect(verdictOf(candidate, { found: true, user: user(candidate.user_id.toUpperCase()), rawJson: '{}', warnings: [] })).toBe('alive');
    expect(verdictOf(candidate, { found: false })).toBe('gone');
    // Upstream reuses a client_user_id after a deletion: another user under the same client id.
    expect(verdictOf(candidate, { found: true, user: user('5d3f3f0c-1c2b-4f6e-8a9d-0e1f2a3b4c5d'), rawJson: '{}', warnings: [] })).toBe(
      'gone',
    );
  });
});

describe('decodePage', () => {
  const good = {
    user_id: '0b6f2c0e-9a51-4e43-9c3b-2a7e1c5d8f10',
    team_id: '5d3f3f0c-1c2b-4f6e-8a9d-0e1f2a3b4c5d',
    client_user_id: 'cu_1',
    connected_sources: [],
    extra_field: { kept: true },
  };
  const bad = { ...good, user_id: 'not-a-uuid' };

  it('stages valid records with their bytes as received, unknown fields kept, and sets the rest aside', () => {
    const text = `[ ${JSON.stringify(good, null, 1)} ,${JSON.stringify(bad)}]`;
    const split = decodePage(pageOf(text), 1_500, () => 'write');
    expect(split.writes).toHaveLength(1);
    expect(split.writes[0]?.record.user.user_id).toBe(good.user_id);
    expect(split.writes[0]?.record.rawJson).toBe(JSON.stringify(good, null, 1));
    expect(split).toMatchObject({ seen: 1, changed: 1, duplicates: 0 });
    expect(split.rejected).toEqual([{ offset: 1_500, index: 1, reason: expect.stringContaining('users[1].user_id'), raw: bad }]);
  });

  it('never parses a record whose bytes the ledger knows: an unchanged one is only sighted', () => {
    const parsedIds: string[] = [];
    // `bad` would be rejected if parsed; the ledger vouching for its bytes means it is not parsed at all.
    const split = decodePage(pageOf(JSON.stringify([bad, good])), 0, (id) => {
      parsedIds.push(id);
      return 'unchanged';
    });
    expect(parsedIds).toEqual(['not-a-uuid', good.user_id]);
    expect(split.rejected).toEqual([]);
    expect(split).toMatchObject({ writes: [], seen: 2, changed: 0, duplicates: 0 });
  });
});

function pageOf(usersJson: string, envelope = (users: string) => `{"total": 2, "users": ${users}, "offset": 0, "limit": 500}`): RecordPage {
  const body = Buffer.from(envelope(usersJson));
  const scan = scanRecordSpans(body);
  if (!scan.ok) throw new Error(scan.reason);
  return { total: 2, offset: 0, limit: 500, body, spans: scan.spans, unknownKeys: [] };
}

describe('scanRecordSpans', () => {
  it('cuts the users array into records and reads each top-level user_id, whatever the strings and nesting hold', () => {
    const records = [
      { nested: { user_id: 'inner' }, user_id: 'a', note: 'braces } ] { [ and "quotes" and \\' },
      { user_id: 'b"A' },
      { user_id: 7 },
      { list: [{ user_id: 'x' }], user_id: 'é-1', tail: [] },
      'not an object',
    ];
    const body = Buffer.from(`{"users":\n[${records.map((r) => JSON.stringify(r)).join(' , ')}], "total": 5, "extra": {"a": [1]}}`);
    const scan = scanRecordSpans(body);
    if (!scan.ok) throw new Error(scan.reason);
    expect(scan.spans.map((s) => JSON.parse(body.toString('utf8', s.start, s.end)) as unknown)).toEqual(records);
    expect(scan.spans.map((s) => s.userId)).toEqual(['a', undefined, undefined, 'é-1', undefined]);
    expect(scan.members).toEqual({ total: 5, extra: { a: [1] } });
    expect(scan.hasRecords).toBe(true);
  });

  it("cuts a leader's feed page into its events by the member named, `next` a member beside them", () => {
    const events = [{ type: 'user.created', data: { user: { user_id: 'a', s: '"events":[' } } }, { type: 'mirror.baseline' }];
    const body = Buffer.from(`{ "events" : [${events.map((e) => JSON.stringify(e)).join(',')}] , "next": 12}`);
    const scan = scanRecordSpans(body, 'events');
    if (!scan.ok) throw new Error(scan.reason);
    expect(scan.spans.map((s) => JSON.parse(body.toString('utf8', s.start, s.end)) as unknown)).toEqual(events);
    expect(scan.members).toEqual({ next: 12 });
    expect(scan.hasRecords).toBe(true);
    // Read as a list page, the same body holds no records.
    const asList = scanRecordSpans(body);
    expect(asList.ok && asList.hasRecords).toBe(false);
  });

  it('refuses a body that is not one JSON object with comma-separated members and records', () => {
    for (const text of [
      '',
      '[]',
      '{"users": [{}',
      '{"users": [{} {}]}',
      '{"total": 1,}',
      '{"total": 1} x',
      '{"users": ["unterminated]}',
      '{"total": tru}',
    ]) {
      expect(scanRecordSpans(Buffer.from(text)).ok, text).toBe(false);
    }
  });
});

describe('decodePage with a record size bound', () => {
  const good = {
    user_id: '0b6f2c0e-9a51-4e43-9c3b-2a7e1c5d8f10',
    team_id: '5d3f3f0c-1c2b-4f6e-8a9d-0e1f2a3b4c5d',
    client_user_id: 'cu_1',
    connected_sources: [],
  };

  it('sets a record above the bound aside with its ids only, valid or not, and counts bytes, not characters', () => {
    const big = { ...good, notes: 'é'.repeat(600) };
    const bigBad = { ...big, user_id: 'not-a-uuid' };
    const split = decodePage(pageOf(JSON.stringify([good, big, bigBad])), 0, () => 'write', 1_000);
    expect(split.writes.map((w) => w.record.user.user_id)).toEqual([good.user_id]);
    expect(split.rejected.map((r) => r.raw)).toEqual([
      { user_id: good.user_id, client_user_id: 'cu_1' },
      { user_id: 'not-a-uuid', client_user_id: 'cu_1' },
    ]);
    expect(split.rejected[0]?.reason).toMatch(/^users\[1\]: record is \d+ bytes, above SYNC_MAX_RECORD_BYTES \(1000\); not stored$/);
  });
});

describe('refusalOf', () => {
  it('names a refused key and says it was not retried; other errors are no refusal', () => {
    expect(refusalOf(new HttpError(401, 'GET', '/v2/user/', undefined, undefined))).toMatch(/refused the key.*not retried/);
    expect(refusalOf(new HttpError(403, 'GET', '/v2/user/', undefined, undefined))).toMatch(/may not list users/);
    expect(refusalOf(new HttpError(403, 'GET', '/v2/user/resolve/cu_1', undefined, undefined))).toMatch(/may not resolve users/);
    expect(refusalOf(new HttpError(503, 'GET', '/v2/user/', undefined, undefined))).toBeUndefined();
    expect(refusalOf(new Error('x'))).toBeUndefined();
  });
});

describe('progress', () => {
  it('derives rate and ETA from pages done', () => {
    const s = { pagesDone: 10, pagesPlanned: 40, usersSeen: 5_000, elapsedMs: 2_000 };
    expect(describeProgress(s)).toEqual({ rate: 2_500, etaMs: 6_000 });
    expect(describeProgress({ ...s, pagesDone: 0, usersSeen: 0, elapsedMs: 0 })).toEqual({ rate: 0, etaMs: undefined });
  });

  it('renders one line', () => {
    expect(formatProgressLine({ pagesDone: 10, pagesPlanned: 40, usersSeen: 5_000, elapsedMs: 2_000 })).toBe(
      'pages 10/40 · users 5,000 · 2,500 users/s · ETA 6s',
    );
  });

  it('formats durations', () => {
    expect(formatDuration(850)).toBe('850ms');
    expect(formatDuration(42_000)).toBe('42s');
    expect(formatDuration(185_000)).toBe('3m05s');
    expect(formatDuration(3_720_000)).toBe('1h02m');
  });
});
