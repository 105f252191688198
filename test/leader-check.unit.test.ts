/**
 * A follower's judgement of its leader (src/sync/leader-check.ts) and the
 * headers it reads it from (src/service/source-freshness.ts), as values.
 */
import { describe, expect, it } from 'vitest';
import { judgeLeader } from '../src/sync/leader-check.js';
import { sourceFreshnessOf, type SourceFreshness } from '../src/service/source-freshness.js';
import { assessStaleness } from '../src/daemon/staleness.js';

const NOW = Date.parse('2026-11-28T12:00:00.000Z');
const fresh: SourceFreshness = {
  runId: 7,
  publishedAt: '2026-11-28T11:55:00.000Z',
  sourceAt: '2026-11-28T11:55:00.000Z',
  epoch: 'a1b2c3d4',
};
const HOUR = 3_600_000;

describe('judgeLeader', () => {
  it('follows a fresh leader of the same epoch, or one seen for the first time', () => {
    expect(judgeLeader(fresh, fresh, NOW, HOUR)).toEqual({ follow: true });
    expect(judgeLeader(fresh, undefined, NOW, HOUR)).toEqual({ follow: true });
  });

  it('refuses a leader whose data at the source is older than the limit, even one that published just now', () => {
    const chained = { ...fresh, publishedAt: '2026-11-28T11:59:00.000Z', sourceAt: '2026-11-28T10:00:00.000Z' };
    const v = judgeLeader(chained, fresh, NOW, HOUR);
    expect(v).toMatchObject({ follow: false, kind: 'stale' });
    expect(v.follow ? '' : v.reason).toMatch(/read from the service at 2026-11-28T10:00:00.000Z \(7200 s ago\).*nothing deleted$/);
  });

  it('refuses a leader restored and not re-synced, and once a leader of another epoch', () => {
    const restored = { ...fresh, restoredAt: '2026-11-28T11:58:00.000Z' };
    expect(judgeLeader(restored, restored, NOW, HOUR)).toMatchObject({ follow: false, kind: 'restored' });
    const resynced = { ...restored, epoch: 'ffff0000', publishedAt: '2026-11-28T11:59:00.000Z', sourceAt: '2026-11-28T11:59:00.000Z' };
    expect(judgeLeader(resynced, fresh, NOW, HOUR)).toMatchObject({ follow: false, kind: 'epoch' });
    expect(judgeLeader(resynced, resynced, NOW, HOUR)).toEqual({ follow: true });
  });
});

describe('sourceFreshnessOf', () => {
  const headers = {
    'x-mirror-run-id': '7',
    'x-mirror-published-at': fresh.publishedAt,
    'x-mirror-source-at': fresh.sourceAt,
    'x-mirror-epoch': fresh.epoch,
  };
  it('reads a replica, and nothing from the service (no run id)', () => {
    expect(sourceFreshnessOf(headers)).toEqual(fresh);
    expect(sourceFreshnessOf({ 'content-type': 'application/json' })).toBeUndefined();
  });
  it('names the header that is missing or malformed', () => {
    expect(sourceFreshnessOf({ ...headers, 'x-mirror-epoch': undefined })).toMatchObject({
      message: expect.stringMatching(/header x-mirror-epoch/),
    });
    const bad = sourceFreshnessOf({ ...headers, 'x-mirror-source-at': 'yesterday' });
    expect(bad instanceof Error ? bad.message : bad).toMatch(/header x-mirror-source-at: must be an ISO 8601 time/);
  });
});

describe('a follower stale from its source', () => {
  it('is stale when its data is older at the source than SYNC_STALE_AFTER_MS, though its own sync is recent', () => {
    const s = assessStaleness({
      lastSucceededAt: new Date(NOW - 60_000),
      sourceAt: new Date(NOW - 2 * HOUR),
      lastProblem: undefined,
      running: undefined,
      now: new Date(NOW),
      staleAfterMs: HOUR,
    });
    expect(s).toMatchObject({ stale: true, ageSeconds: 60, sourceAgeSeconds: 7200 });
    expect(s.reason).toMatch(/^source: the leader's data was read from the service at .*the leader at SERVICE_BASE_URL is stale$/);
  });
});
