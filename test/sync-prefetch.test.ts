/**
 * A re-sync does not fetch its first page alone: it asks for its first
 * `concurrency` pages at once, planned from the last run's total, so a far
 * service's round trip is paid once, not twice. Against the stand-in with
 * 300 ms of latency a request, over real HTTP: which pages reach the
 * stand-in before page 0 has been answered.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RequestLogEntry } from '../src/stand-in/index.js';
import { createSyncRig, type SyncRig } from './support/sync-rig.js';

const LATENCY_MS = 300;

let rig: SyncRig;
const arrivals: Array<{ offset: number; at: number }> = [];

beforeAll(async () => {
  rig = await createSyncRig({
    users: 3_000,
    faults: { latencyMs: LATENCY_MS },
    onRequest: (e: RequestLogEntry) => {
      if (e.route !== 'list') return;
      arrivals.push({ offset: Number(new URLSearchParams(e.query).get('offset') ?? 0), at: performance.now() - e.durationMs });
    },
  });
});
afterAll(async () => {
  await rig?.close();
});

/** Requests of one run that reached the stand-in before page 0 could have been answered. */
async function beforePageZeroAnswered(): Promise<number[]> {
  arrivals.length = 0;
  expect((await rig.sync({ concurrency: 4 })).status).toBe('succeeded');
  const zero = arrivals.find((a) => a.offset === 0);
  expect(zero).toBeDefined();
  return arrivals
    .filter((a) => a.at < (zero?.at ?? 0) + LATENCY_MS / 2)
    .map((a) => a.offset)
    .sort((a, b) => a - b);
}

describe('the first requests of a run', () => {
  it('a first sync knows no total: page 0 goes alone', async () => {
    expect(await beforePageZeroAnswered()).toEqual([0]);
  });

  it("a re-sync asks for its first 4 pages at once, from the last run's total, and lists every user once", async () => {
    expect(await beforePageZeroAnswered()).toEqual([0, 500, 1_000, 1_500]);
    const pages = arrivals.map((a) => a.offset).sort((a, b) => a - b);
    expect(pages).toEqual([0, 500, 1_000, 1_500, 2_000, 2_500]);
  });

  it('a directory that shrank below the plan: the pages past its end are dropped, the run still complete', async () => {
    const d = rig.standIn.directory;
    // No latency now: the run checks each of the 2,400 missing users with the service.
    rig.standIn.faults.set({ latencyMs: 0 });
    d.delete(d.page(0, 2_400).map((u) => String(u.user_id)));
    // The mass-delete breaker would hold 80% of the directory back; this run means it.
    arrivals.length = 0;
    const summary = await rig.sync({ concurrency: 4, maxDeleteRatio: 1, maxVerify: 5_000 });
    expect(summary).toMatchObject({ status: 'succeeded', usersSeen: 600, deleted: 2_400 });
    // Asked for beside page 0 from the old total of 3,000; the listing now ends at 600.
    expect(arrivals.map((a) => a.offset).filter((o) => o >= 1_000).length).toBeGreaterThan(0);
  });
});
