/**
 * A follower's judgement of its leader (src/sync/leader-check.ts), its pin
 * of one leader and one team on every answer (src/sync/leader-pin.ts), and
 * the headers it reads them from (src/service/source-freshness.ts), as values.
 */
import { describe, expect, it } from 'vitest';
import { judgeLeader } from '../src/sync/leader-check.js';
import { leaderChange, LeaderPin, pinTeam } from '../src/sync/leader-pin.js';
import { scanRecordSpans } from '../src/service/page-spans.js';
import { LeaderUntrusted, sourceFreshnessOf, type SourceFreshness } from '../src/service/source-freshness.js';
import { assessStaleness } from '../src/health/staleness.js';

const NOW = Date.parse('2026-11-28T12:00:00.000Z');
const fresh: SourceFreshness = {
  runId: 7,
  publishedAt: '2026-11-28T11:55:00.000Z',
  sourceAt: '2026-11-28T11:55:00.000Z',
  epoch: 'a1b2c3d4',
};
const HOUR = 3_600_000;

describe('judgeLeader', () => {
  it('follows a fresh leader', () => {
    expect(judgeLeader(fresh, NOW, HOUR)).toEqual({ follow: true });
  });

  it('refuses a leader whose data at the source is older than the limit, even one that published just now', () => {
    const chained = { ...fresh, publishedAt: '2026-11-28T11:59:00.000Z', sourceAt: '2026-11-28T10:00:00.000Z' };
    const v = judgeLeader(chained, NOW, HOUR);
    expect(v).toMatchObject({ follow: false, kind: 'stale' });
    expect(v.follow ? '' : v.reason).toMatch(/read from the service at 2026-11-28T10:00:00.000Z \(7200 s ago\).*nothing deleted$/);
  });

  it('refuses a leader restored and not re-synced; a re-synced one of another epoch is followed (no flip between runs)', () => {
    const restored = { ...fresh, restoredAt: '2026-11-28T11:58:00.000Z' };
    expect(judgeLeader(restored, NOW, HOUR)).toMatchObject({ follow: false, kind: 'restored' });
    const resynced = { ...restored, epoch: 'ffff0000', publishedAt: '2026-11-28T11:59:00.000Z', sourceAt: '2026-11-28T11:59:00.000Z' };
    expect(judgeLeader(resynced, NOW, HOUR)).toEqual({ follow: true });
  });
});

describe('the team a follower pins (pinTeam)', () => {
  const A = '0b6a0c2e-6f4e-4a51-9d59-3c2a4d9a0001';
  const B = '0b6a0c2e-6f4e-4a51-9d59-3c2a4d9a0002';
  it("takes SYNC_FOLLOW_TEAM first, else the mirror's one team, else the run's first record", () => {
    expect(pinTeam(A.toUpperCase(), [B])).toEqual({ team: A, from: 'SYNC_FOLLOW_TEAM' });
    expect(pinTeam(undefined, [B])).toEqual({ team: B, from: "this mirror's users" });
    expect(pinTeam(undefined, [])).toEqual({ team: undefined, from: "the leader's first record" });
  });
  it('refuses a mirror that holds two teams when none is configured', () => {
    expect(pinTeam(undefined, [A, B])).toEqual({ refused: expect.stringMatching(/more than one team .*set SYNC_FOLLOW_TEAM/) });
  });
});

describe('LeaderPin: one leader, one team, on every answer', () => {
  const A = '0b6a0c2e-6f4e-4a51-9d59-3c2a4d9a0001';
  const B = '0b6a0c2e-6f4e-4a51-9d59-3c2a4d9a0002';
  const page = (...teams: string[]) => {
    const body = Buffer.from(
      `{"users":[${teams.map((t, i) => `{"user_id":"u${i}","nested":{"team_id":"${A}"},"team_id":"${t}"}`).join(',')}],"total":1}`,
    );
    const scan = scanRecordSpans(body);
    if (!scan.ok) throw new Error(scan.reason);
    return { body, spans: scan.spans };
  };

  it('the first answer pins the leader; the same epoch and restore pass, a later publish included', () => {
    const pin = new LeaderPin({ team: undefined, from: 'x' });
    expect(pin.check('page 0', fresh)).toBe(fresh);
    expect(pin.check('page 1', { ...fresh, runId: 8, publishedAt: '2026-11-28T11:59:00.000Z' })).toMatchObject({ runId: 8 });
  });

  it('refuses an answer with no headers, another epoch, or another restore', () => {
    const pin = new LeaderPin({ team: undefined, from: 'x' });
    expect(() => pin.check('page 0', undefined)).toThrow(LeaderUntrusted);
    expect(() => pin.check('page 0', undefined)).toThrow(/carried no x-mirror-\* freshness headers.*nothing published, nothing deleted/);
    pin.check('page 0', fresh);
    expect(() => pin.check('page 1', { ...fresh, epoch: 'ffff0000' })).toThrow(
      /leader changed during the run: page 1 .*epoch a1b2c3d4 → ffff0000/,
    );
    expect(() => pin.check('page 1', { ...fresh, restoredAt: '2026-11-28T11:58:00.000Z' })).toThrow(/restored at never → 2026-11-28T11:58/);
    expect(leaderChange(fresh, { ...fresh, cursor: 9, runId: 9 })).toBeUndefined();
  });

  it("checks every record's top-level team_id, not a nested one; the first record pins the team when none is", () => {
    const pin = new LeaderPin({ team: undefined, from: "the leader's first record" });
    const same = page(B, B);
    expect(same.spans[0]).toMatchObject({ userId: 'u0' });
    pin.checkRecords('page 0', same.body, same.spans);
    const mixed = page(B, A);
    expect(() => pin.checkRecords('page 1', mixed.body, mixed.spans)).toThrow(
      new RegExp(`page 1 holds a user of team ${A}, not of team ${B} \\(from the run's first record\\)`),
    );
  });

  it("reads a team_id the scan could not (escaped) by parsing the record; a resolve answer's user too", () => {
    const pin = new LeaderPin({ team: A, from: 'SYNC_FOLLOW_TEAM' });
    const escaped = Buffer.from(`{"users":[{"user_id":"u","team_id":"\\u0030${B.slice(1)}"}],"total":1}`);
    const scan = scanRecordSpans(escaped);
    if (!scan.ok) throw new Error(scan.reason);
    expect(scan.spans[0]?.teamAt).toBe(-1);
    expect(() => pin.checkRecords('page 0', escaped, scan.spans)).toThrow(/holds a user of team 0b6a/);
    pin.checkResolve('a check', { found: false, source: fresh });
    expect(() => pin.checkResolve('a check', { found: false, source: { ...fresh, epoch: 'other' } })).toThrow(/leader changed/);
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
