/**
 * The sync engine end to end, in-process: the stand-in over real HTTP, the
 * real client, a real SQLite mirror file. No mocks.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startStandIn } from '../src/stand-in/index.js';
import { runSync } from '../src/sync/engine.js';
import type { ProgressSnapshot } from '../src/sync/progress.js';
import {
  FAST_BACKOFF,
  changeCounts,
  clientFor,
  createSyncRig,
  directoryView,
  listPagesServed,
  mirrorFingerprint,
  mirrorView,
  runRow,
  type SyncRig,
} from './support/sync-rig.js';

let rig: SyncRig | undefined;
afterEach(async () => {
  await rig?.close();
  rig = undefined;
});

async function start(users: number, extra: Parameters<typeof createSyncRig>[0] = {}): Promise<SyncRig> {
  rig = await createSyncRig({ users, ...extra });
  return rig;
}

describe('a first sync', () => {
  it('makes the mirror equal the directory: ids, client ids, sources and raw records', async () => {
    const r = await start(2_345);
    const progress: ProgressSnapshot[] = [];
    const summary = await r.sync({ onProgress: (p) => progress.push(p) });

    expect(summary).toMatchObject({
      status: 'succeeded',
      pages: 5,
      pageFailures: 0,
      passes: 1,
      usersSeen: 2_345,
      created: 2_345,
      updated: 0,
      deleted: 0,
      rejected: 0,
      totalAtStart: 2_345,
      totalAtEnd: 2_345,
    });
    expect(summary.reason).toBeUndefined();
    expect(mirrorView(r.db)).toEqual(directoryView(r.standIn));
    expect(runRow(r.db, summary.runId)).toMatchObject({ status: 'succeeded', pages: 5, users_seen: 2_345, swept: 1 });
    expect(progress.at(-1)).toMatchObject({ pass: 0, pagesDone: 5, pagesPlanned: 5, usersSeen: 2_345 });
  });

  it('always asks for 500 at a time, page 0 first, then re-reads page 0 for the closing total', async () => {
    const r = await start(1_200);
    await r.sync({ concurrency: 3 });
    const lists = r.standIn.requests.entries().filter((e) => e.route === 'list');
    expect(lists.map((e) => new URLSearchParams(e.query).get('limit'))).toEqual(['500', '500', '500', '500']);
    const offsets = lists.map((e) => Number(new URLSearchParams(e.query).get('offset')));
    expect(offsets[0]).toBe(0);
    expect(offsets.slice(1, 3).sort((a, b) => a - b)).toEqual([500, 1_000]);
    expect(offsets[3]).toBe(0);
  });

  it('handles an empty directory', async () => {
    const r = await start(0);
    const summary = await r.sync();
    expect(summary).toMatchObject({ status: 'succeeded', pages: 1, usersSeen: 0, created: 0 });
  });
});

describe('a re-sync', () => {
  it('writes no change rows when nothing changed', async () => {
    const r = await start(1_700);
    await r.sync();
    const before = mirrorFingerprint(r.db);
    const again = await r.sync();
    expect(again).toMatchObject({ status: 'succeeded', created: 0, updated: 0, deleted: 0, usersSeen: 1_700 });
    expect(changeCounts(r.db, again.runId)).toEqual({});
    expect(mirrorFingerprint(r.db)).toEqual(before);
  });

  it('applies updates, creations and deletions', async () => {
    const r = await start(1_500);
    await r.sync();
    const ids = [...directoryView(r.standIn).keys()];
    for (const id of ids.slice(0, 7)) r.standIn.directory.update(id);
    const gone = ids.slice(100, 105);
    r.standIn.directory.delete(gone);
    const added = r.standIn.directory.add(3);

    const summary = await r.sync();
    expect(summary).toMatchObject({ status: 'succeeded', created: 3, updated: 7, deleted: 5 });
    expect(changeCounts(r.db, summary.runId)).toEqual({ created: 3, updated: 7, deleted: 5 });
    expect(mirrorView(r.db)).toEqual(directoryView(r.standIn));
    const deletedAt = r.db.prepare<[string], { deleted_at: string | null }>('SELECT deleted_at FROM users WHERE user_id = ?');
    for (const id of gone) expect(deletedAt.get(id)?.deleted_at).not.toBeNull();
    for (const id of added) expect(deletedAt.get(id)?.deleted_at).toBeNull();
  });

  it('restores a deleted user that reappears', async () => {
    const r = await start(1_000, { seed: 21 });
    await r.sync();
    const gone = [...directoryView(r.standIn).keys()].slice(10, 20);
    r.standIn.directory.delete(gone);
    expect(await r.sync()).toMatchObject({ status: 'succeeded', deleted: 10 });

    // The same seed again: the same thousand users, the ten deleted ones included.
    const again = await startStandIn({ users: 1_000, seed: 21, orgs: 0, membersPerOrg: 0 });
    const client = clientFor(again);
    try {
      const summary = await runSync({ client, writer: r.writer, backoff: FAST_BACKOFF });
      expect(summary).toMatchObject({ status: 'succeeded', created: 10, updated: 0, deleted: 0 });
      expect(mirrorView(r.db)).toEqual(directoryView(again));
      const created = r.db
        .prepare<[number], { user_id: string }>("SELECT user_id FROM user_changes WHERE run_id = ? AND change = 'created'")
        .all(summary.runId)
        .map((c) => c.user_id);
      expect(created.sort()).toEqual([...gone].sort());
    } finally {
      await client.close();
      await again.close();
    }
  });
});

describe('the sweep refuses what an incomplete or shifting scan cannot prove', () => {
  it('drift that changes the total: bounded re-scans, then partial with creates published and nothing deleted', async () => {
    const r = await start(2_000);
    await r.sync();
    const gone = [...directoryView(r.standIn).keys()].slice(0, 3);
    r.standIn.directory.delete(gone);
    r.standIn.faults.set({ churnAddPerPage: 2 });
    const pagesBefore = listPagesServed(r.standIn);

    const summary = await r.sync({ driftRescans: 2 });
    expect(summary.status).toBe('partial');
    expect(summary.passes).toBe(3);
    expect(summary.deleted).toBe(0);
    expect(summary.created).toBeGreaterThan(0);
    expect(summary.reason).toMatch(/total changed during the scan/);
    // Each pass: its pages plus the closing page 0 (which is the next pass's first page).
    expect(listPagesServed(r.standIn) - pagesBefore).toBeLessThanOrEqual(1 + 3 * 5);
    const row = runRow(r.db, summary.runId);
    expect(row).toMatchObject({ status: 'partial', swept: 0, rescans: 2 });
    expect(row?.error).toMatch(/total changed/);
    const active = r.db.prepare<[string], { deleted_at: string | null }>('SELECT deleted_at FROM users WHERE user_id = ?');
    for (const id of gone) expect(active.get(id)?.deleted_at).toBeNull();
  });

  it('drift that keeps every count (delete behind the cursor, add at the end) is caught by checking the candidates upstream', async () => {
    const r = await start(3_000, { seed: 5 });
    await r.sync();
    r.standIn.faults.set({ churnAddPerPage: 1, churnDeletePerPage: 1 });
    // One page at a time, in order: deletions behind the cursor then only ever skip users, never
    // repeat one, so total, distinct count and duplicates all look clean.
    const summary = await r.sync({ driftRescans: 1, maxDeleteRatio: 1, concurrency: 1 });
    expect(summary.status).toBe('partial');
    expect(summary.passes).toBe(2);
    expect(summary.deleted).toBe(0);
    expect(summary.reason).toMatch(/still exist upstream/);
    expect(r.standIn.counts.get('resolve')).toBeGreaterThan(0);
  });

  it('a re-scan after drift that settled succeeds and sweeps', async () => {
    const r = await start(2_000);
    await r.sync();
    r.standIn.faults.set({ churnAddPerPage: 3, churnDeletePerPage: 1 });
    const summary = await r.sync({
      driftRescans: 2,
      onProgress: (p) => {
        // Calm before the closing read of the first pass, so the second pass sees a still directory.
        if (p.pass === 0 && p.pagesDone === p.pagesPlanned) r.standIn.faults.set({ churnAddPerPage: 0, churnDeletePerPage: 0 });
      },
    });
    expect(summary).toMatchObject({ status: 'succeeded', passes: 2 });
    expect(mirrorView(r.db)).toEqual(directoryView(r.standIn));
  });

  it('the mass-delete breaker: above SYNC_MAX_DELETE_RATIO nothing is deleted, and a higher limit lets it through', async () => {
    const r = await start(1_000);
    await r.sync();
    const gone = [...directoryView(r.standIn).keys()].slice(0, 150);
    r.standIn.directory.delete(gone);
    r.standIn.directory.update([...directoryView(r.standIn).keys()][0] ?? '');
    const before = mirrorView(r.db).size;

    const refused = await r.sync({ maxDeleteRatio: 0.1 });
    expect(refused).toMatchObject({ status: 'partial', deleted: 0, updated: 1 });
    expect(refused.reason).toMatch(/would delete 150 of 1000.*SYNC_MAX_DELETE_RATIO/);
    expect(mirrorView(r.db).size).toBe(before);
    expect(runRow(r.db, refused.runId)?.error).toMatch(/SYNC_MAX_DELETE_RATIO/);

    const allowed = await r.sync({ maxDeleteRatio: 0.2 });
    expect(allowed).toMatchObject({ status: 'succeeded', deleted: 150 });
    expect(mirrorView(r.db)).toEqual(directoryView(r.standIn));
  });

  it('a record with a valid identity is always mirrored: bad optional fields become NULL and field warnings', async () => {
    const odd = {
      user_id: 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d',
      team_id: 'b2c3d4e5-f6a7-4b8c-9d0e-1f2a3b4c5d6e',
      client_user_id: 'cu_odd',
      created_on: '2026-01-28T12:53:04',
      connected_sources: [{ created_on: '2026-01-28T12:53:04Z' }],
      fallback_time_zone: { source_slug: 'manual' },
      ingestion_start: 'ingestion_start',
      ingestion_end: 'ingestion_end',
    };
    const r = await start(300, { records: [odd] });
    const summary = await r.sync();
    expect(summary).toMatchObject({ status: 'succeeded', rejected: 0, created: 301 });
    expect(r.db.prepare('SELECT created_on, fallback_time_zone_id, ingestion_start, raw FROM users WHERE user_id = ?').get(odd.user_id)).toEqual({
      created_on: '2026-01-28T12:53:04.000Z',
      fallback_time_zone_id: null,
      ingestion_start: null,
      raw: JSON.stringify(odd),
    });
    expect(r.db.prepare('SELECT field, run_id FROM field_warnings ORDER BY field').all()).toEqual([
      { field: 'connected_sources[0].provider', run_id: summary.runId },
      { field: 'fallback_time_zone.id', run_id: summary.runId },
      { field: 'ingestion_end', run_id: summary.runId },
      { field: 'ingestion_start', run_id: summary.runId },
    ]);
  });

  it('a record that fails validation is set aside: partial, the rest published, nothing deleted', async () => {
    const bad = { user_id: 'not-a-uuid', team_id: 'also-not', client_user_id: 'cu_bad', connected_sources: [] };
    const r = await start(1_200, { records: [bad] });
    const summary = await r.sync();
    expect(summary).toMatchObject({ status: 'partial', rejected: 1, created: 1_200, deleted: 0 });
    expect(summary.reason).toMatch(/failed validation/);
    const rejected = r.db.prepare<[number], { reason: string; raw: string }>('SELECT reason, raw FROM rejected_records WHERE run_id = ?').all(summary.runId);
    expect(rejected).toHaveLength(1);
    expect(rejected[0]?.reason).toMatch(/users\[0\]\.user_id/);
    expect(JSON.parse(rejected[0]?.raw ?? 'null')).toEqual(bad);
  });
});

describe('retries', () => {
  it('retries 429 and 503 honouring Retry-After, and connection resets', async () => {
    const r = await start(1_600);
    r.standIn.faults.failNext({ status: 429, retryAfter: 1, pathPrefix: '/v2/user' });
    r.standIn.faults.failNext({ status: 503, pathPrefix: '/v2/user', times: 2 });
    r.standIn.faults.failNext({ fault: 'reset', pathPrefix: '/v2/user', times: 2 });
    const started = performance.now();
    // The five queued failures may all land on page 0, one after the other.
    const summary = await r.sync({ pageAttempts: 6 });
    expect(performance.now() - started).toBeGreaterThanOrEqual(1_000);
    expect(summary).toMatchObject({ status: 'succeeded', usersSeen: 1_600, pageFailures: 0 });
    expect(r.standIn.counts.get('list', 429)).toBe(1);
    expect(r.standIn.counts.get('list', 503)).toBe(2);
    expect(r.standIn.counts.get('list', 0)).toBe(2);
    expect(mirrorView(r.db)).toEqual(directoryView(r.standIn));
  });

  it('survives a steady rate of 429, 503 and resets', async () => {
    const r = await start(4_000, { faults: { rate429: 0.1, rate503: 0.1, resetRate: 0.1, retryAfter: 0 } });
    const summary = await r.sync({ pageAttempts: 12, concurrency: 4 });
    expect(summary).toMatchObject({ status: 'succeeded', usersSeen: 4_000 });
    expect(r.standIn.counts.get('list', 429) + r.standIn.counts.get('list', 503) + r.standIn.counts.get('list', 0)).toBeGreaterThan(0);
    expect(mirrorView(r.db)).toEqual(directoryView(r.standIn));
  });

  it('a page that keeps failing makes the run partial: other pages published, nothing deleted', async () => {
    const r = await start(2_500);
    await r.sync();
    r.standIn.directory.delete([...directoryView(r.standIn).keys()].slice(0, 2));
    const updated = [...directoryView(r.standIn).keys()][10] ?? '';
    r.standIn.directory.update(updated);
    let armed = false;
    const summary = await r.sync({
      onProgress: () => {
        if (armed) return;
        armed = true;
        // After page 0: the next list request is refused for good (a 401 is not retried).
        r.standIn.faults.failNext({ status: 401, pathPrefix: '/v2/user' });
      },
    });
    expect(summary).toMatchObject({ status: 'partial', pageFailures: 1, deleted: 0, updated: 1 });
    expect(summary.reason).toMatch(/1 page\(s\) failed/);
    expect(mirrorView(r.db).size).toBe(2_500);
  });
});

describe('a service that is down', () => {
  it('records a failed run and leaves the mirror untouched', async () => {
    const r = await start(1_000);
    await r.sync();
    r.standIn.directory.delete([...directoryView(r.standIn).keys()].slice(0, 5));
    r.standIn.directory.add(5);
    const before = mirrorFingerprint(r.db);
    r.standIn.faults.set({ rate503: 1, retryAfter: 0 });

    const summary = await r.sync({ pageAttempts: 3 });
    expect(summary).toMatchObject({ status: 'failed', pages: 0, created: 0, updated: 0, deleted: 0 });
    expect(summary.reason).toMatch(/first page failed.*503/);
    expect(mirrorFingerprint(r.db)).toEqual(before);
    expect(runRow(r.db, summary.runId)).toMatchObject({ status: 'failed', published_at: null });
    expect(r.standIn.counts.get('list', 503)).toBe(3);
  });

  it('going down mid-scan stops the pass early: what was read is published, nothing deleted', async () => {
    const r = await start(10_000);
    await r.sync();
    r.standIn.directory.update([...directoryView(r.standIn).keys()][0] ?? '');
    r.standIn.directory.delete([...directoryView(r.standIn).keys()].slice(-3));
    let armed = false;
    const summary = await r.sync({
      concurrency: 2,
      pageAttempts: 2,
      onProgress: () => {
        if (armed) return;
        armed = true;
        r.standIn.faults.set({ rate503: 1, retryAfter: 0 });
      },
    });
    expect(summary).toMatchObject({ status: 'partial', pages: 1, updated: 1, deleted: 0 });
    expect(summary.reason).toMatch(/stopped early/);
    // Three pages in a row gave up (plus at most one already in flight), not all nineteen.
    expect(summary.pageFailures).toBeGreaterThanOrEqual(3);
    expect(summary.pageFailures).toBeLessThanOrEqual(4);
    expect(r.standIn.counts.get('list', 503)).toBeLessThanOrEqual(8);
  });

  it('fails the same way when nothing listens at all', async () => {
    const r = await start(300);
    await r.sync();
    const before = mirrorFingerprint(r.db);
    const dead = await startStandIn({ users: 0 });
    await dead.close();
    const client = clientFor(dead);
    try {
      const summary = await runSync({ client, writer: r.writer, backoff: FAST_BACKOFF, pageAttempts: 2 });
      expect(summary.status).toBe('failed');
      expect(summary.reason).toMatch(/network error/);
      expect(mirrorFingerprint(r.db)).toEqual(before);
    } finally {
      await client.close();
    }
  });

  it('an aborted run is failed and publishes nothing', async () => {
    const r = await start(3_000, { faults: { latencyMs: 30 } });
    const abort = new AbortController();
    const summary = await r.sync({
      signal: abort.signal,
      concurrency: 1,
      onProgress: (p) => {
        if (p.pagesDone === 2) abort.abort();
      },
    });
    expect(summary).toMatchObject({ status: 'failed', reason: 'aborted' });
    expect(mirrorView(r.db).size).toBe(0);
  });
});
