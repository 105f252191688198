/**
 * The remembered freshness verdict (src/replica/answers.ts rememberedJudge):
 * the same headers as judging afresh, whatever the clock and the freshness do.
 */
import { describe, expect, it } from 'vitest';
import type { Freshness } from '../db/replica-reader.js';
import { judgeFreshness, rememberedJudge, STALE_WARNING } from '../src/replica/answers.js';

const SYNCED = '2026-11-28T10:00:00.000Z';
const MAX_MS = 60_000;

describe('a remembered freshness verdict', () => {
  it('turns stale when the clock passes the bound, for the same freshness, and fresh again if the clock goes back', () => {
    const f: Freshness = {
      runId: 4,
      syncedAt: SYNCED,
      lineage: { publishedAt: SYNCED, sourceAt: SYNCED, epoch: 'e1', restoredAt: undefined, cursor: 9 },
    };
    let now = Date.parse(SYNCED) + MAX_MS;
    const judge = rememberedJudge(MAX_MS, () => now);
    for (const at of [0, 1, 2, -2, 5_000_000, -5_000_000]) {
      now = Date.parse(SYNCED) + MAX_MS + at;
      const v = judge(f);
      const fresh = judgeFreshness(f, now, MAX_MS);
      expect(v.headers, String(at)).toEqual(fresh.headers);
      expect({ serving: v.serving, ready: v.ready, reason: v.reason }).toEqual({
        serving: fresh.serving,
        ready: fresh.ready,
        reason: fresh.reason,
      });
      expect(v.headers.includes(STALE_WARNING)).toBe(at > 0);
    }
  });

  it('follows every field the headers carry, not only the run', () => {
    const now = Date.parse(SYNCED);
    const judge = rememberedJudge(MAX_MS, () => now);
    const base = { publishedAt: SYNCED, sourceAt: SYNCED, epoch: 'e1', restoredAt: undefined, cursor: 9 };
    const variants: Freshness[] = [
      { runId: 4, syncedAt: SYNCED, lineage: base },
      { runId: 4, syncedAt: SYNCED, lineage: { ...base, cursor: 10 } },
      { runId: 4, syncedAt: SYNCED, lineage: { ...base, cursor: 10, restoredAt: SYNCED } },
      { runId: 4, syncedAt: SYNCED, lineage: { ...base, cursor: 10, restoredAt: SYNCED, epoch: 'e2' } },
      {
        runId: 4,
        syncedAt: SYNCED,
        lineage: { ...base, cursor: 10, restoredAt: SYNCED, epoch: 'e2', sourceAt: '2026-11-28T09:00:00.000Z' },
      },
      { runId: 5, syncedAt: SYNCED },
      { runId: 5, syncedAt: '2026-11-28T10:01:00.000Z' },
      { runId: null, syncedAt: null },
    ];
    for (const f of variants) expect(judge(f).headers).toEqual(judgeFreshness(f, now, MAX_MS).headers);
  });
});
