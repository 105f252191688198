/**
 * The sync engine end to end, in-process: the stand-in over real HTTP, the
 * real client, a real SQLite mirror file. No mocks.
 */
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../src/runtime/log.js';
import type { PageParams } from '../src/service/client.js';
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
    expect(progress.at(-1)).toMatchObject({ pagesDone: 5, pagesPlanned: 5, usersSeen: 2_345 });
  });

  it('always asks for 500 at a time, page 0 first, each page once', async () => {
    const r = await start(1_200);
    await r.sync({ concurrency: 3 });
    const lists = r.standIn.requests.entries().filter((e) => e.route === 'list');
    expect(lists.map((e) => new URLSearchParams(e.query).get('limit'))).toEqual(['500', '500', '500']);
    const offsets = lists.map((e) => Number(new URLSearchParams(e.query).get('offset')));
    expect(offsets[0]).toBe(0);
    expect(offsets.slice(1).sort((a, b) => a - b)).toEqual([500, 1_000]);
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

describe('deletions are verified upstream, so a moving listing never blocks them', () => {
  it('sign-ups during the scan: one pass, succeeded, and users deleted before the run are deleted by it', async () => {
    const r = await start(2_000);
    await r.sync();
    const gone = [...directoryView(r.standIn).keys()].slice(0, 3);
    r.standIn.directory.delete(gone);
    r.standIn.faults.set({ churnAddPerPage: 2 });
    const pagesBefore = listPagesServed(r.standIn);

    const summary = await r.sync();
    expect(summary).toMatchObject({ status: 'succeeded', deleted: 3, confirmedGone: 3, stillThere: 0, unverified: 0, deferred: 0 });
    expect(summary.candidates).toBe(3);
    expect(summary.created).toBeGreaterThan(0);
    // Pages saw the directory grow past the 1,997 users it held when the run began (which page said
    // so last depends on the order they arrived: the first four are asked for at once).
    const largest = Math.max(summary.totalAtStart ?? 0, summary.totalAtEnd ?? 0);
    expect(largest).toBeGreaterThan(1_997);
    // One pass, no re-scan: a page per 500 users listed (the sign-ups appended during the scan included).
    expect(listPagesServed(r.standIn) - pagesBefore).toBeLessThanOrEqual(Math.ceil(largest / 500));
    expect(listPagesServed(r.standIn) - pagesBefore).toBeGreaterThanOrEqual(4);
    expect(r.standIn.counts.get('resolve')).toBe(3);
    expect(runRow(r.db, summary.runId)).toMatchObject({ status: 'succeeded', swept: 1, error: null });
    const deletedAt = r.db.prepare<[string], { deleted_at: string | null }>('SELECT deleted_at FROM users WHERE user_id = ?');
    for (const id of gone) expect(deletedAt.get(id)?.deleted_at).not.toBeNull();
  });

  it('a listing that skips users (deleted behind the cursor): the skipped users are checked, found alive and kept', async () => {
    const r = await start(3_000, { seed: 5 });
    await r.sync();
    r.standIn.faults.set({ churnAddPerPage: 1, churnDeletePerPage: 1 });
    // One page at a time, in order: a deletion behind the cursor moves a live user past it unseen.
    const summary = await r.sync({ maxDeleteRatio: 1, concurrency: 1 });
    r.standIn.faults.set({ churnAddPerPage: 0, churnDeletePerPage: 0 });
    expect(summary.status).toBe('succeeded');
    expect(summary.stillThere).toBeGreaterThan(0);
    expect(summary.candidates).toBe(summary.confirmedGone + summary.stillThere);
    const live = directoryView(r.standIn);
    const deleted = r.db.prepare<[], { user_id: string }>('SELECT user_id FROM users WHERE deleted_at IS NOT NULL').all();
    expect(deleted.length).toBe(summary.confirmedGone);
    for (const { user_id } of deleted) expect(live.has(user_id)).toBe(false);
    // The next, quiet run lists everyone the moving one skipped; its only candidates are users
    // deleted during the moving run after it had listed them.
    const quiet = await r.sync();
    expect(quiet).toMatchObject({ status: 'succeeded', stillThere: 0 });
    expect(quiet.confirmedGone).toBe(quiet.candidates);
    expect(mirrorView(r.db)).toEqual(directoryView(r.standIn));
  });

  it('over 20 runs of random churn (adds, deletes, shifts): every run succeeds, deletions land in the first run after them, and no live user is ever deleted', async () => {
    const r = await start(3_000, { seed: 77 });
    await r.sync();
    let prng = 12_345;
    const rand = (n: number) => {
      prng = (prng * 1_103_515_245 + 12_345) % 2_147_483_648;
      return prng % n;
    };
    const everSeen = new Set(directoryView(r.standIn).keys());
    for (let run = 0; run < 20; run++) {
      const ids = [...directoryView(r.standIn).keys()];
      r.standIn.directory.delete(Array.from({ length: rand(25) }, () => ids[rand(ids.length)] ?? ''));
      r.standIn.directory.add(rand(20));
      for (let k = rand(10); k > 0; k--) r.standIn.directory.update(ids[rand(ids.length)] ?? '');
      r.standIn.faults.set({ churnAddPerPage: rand(3), churnDeletePerPage: rand(3) });
      const liveAtStart = new Set(directoryView(r.standIn).keys());
      for (const id of liveAtStart) everSeen.add(id);

      const summary = await r.sync({ concurrency: 1 + rand(4) });
      r.standIn.faults.set({ churnAddPerPage: 0, churnDeletePerPage: 0 });
      const liveAtEnd = new Set(directoryView(r.standIn).keys());
      expect(summary.status, `run ${run}: ${summary.reason ?? ''}`).toBe('succeeded');
      const active = new Set(mirrorView(r.db).keys());
      // Deleted upstream before the run began: not active after it.
      for (const id of everSeen) if (!liveAtStart.has(id)) expect(active.has(id), `run ${run}: ${id} still active`).toBe(false);
      // Alive upstream when the run ended (so throughout it): never marked deleted.
      const deleted = r.db.prepare<[], { user_id: string }>('SELECT user_id FROM users WHERE deleted_at IS NOT NULL').all();
      for (const { user_id } of deleted) expect(liveAtEnd.has(user_id), `run ${run}: live ${user_id} deleted`).toBe(false);
    }
  });

  it('50% of the directory gone: the mass-delete breaker holds, nothing is checked or deleted, and a higher limit lets it through', async () => {
    const r = await start(1_000);
    await r.sync();
    const gone = [...directoryView(r.standIn).keys()].slice(0, 500);
    r.standIn.directory.delete(gone);
    r.standIn.directory.update([...directoryView(r.standIn).keys()][0] ?? '');
    const before = mirrorView(r.db).size;

    const refused = await r.sync({ maxDeleteRatio: 0.1 });
    expect(refused).toMatchObject({ status: 'partial', deleted: 0, updated: 1, candidates: 500, deferred: 500, confirmedGone: 0 });
    expect(refused.reason).toMatch(/500 of 1000 active user\(s\) \(50\.0%\).*SYNC_MAX_DELETE_RATIO/);
    expect(r.standIn.counts.get('resolve')).toBe(0);
    expect(mirrorView(r.db).size).toBe(before);
    expect(runRow(r.db, refused.runId)).toMatchObject({ status: 'partial', swept: 0 });

    const allowed = await r.sync({ maxDeleteRatio: 0.6 });
    expect(allowed).toMatchObject({ status: 'succeeded', deleted: 500 });
    expect(mirrorView(r.db)).toEqual(directoryView(r.standIn));
  });

  it('checks at most maxVerify candidates per run; the rest stay active and are settled by later runs', async () => {
    const r = await start(1_000);
    await r.sync();
    r.standIn.directory.delete([...directoryView(r.standIn).keys()].slice(0, 50));
    const first = await r.sync({ maxVerify: 20 });
    expect(first).toMatchObject({ status: 'succeeded', candidates: 50, confirmedGone: 20, deferred: 30, deleted: 20 });
    const second = await r.sync({ maxVerify: 20 });
    expect(second).toMatchObject({ status: 'succeeded', candidates: 30, confirmedGone: 20, deferred: 10 });
    const third = await r.sync({ maxVerify: 20 });
    expect(third).toMatchObject({ status: 'succeeded', candidates: 10, confirmedGone: 10, deferred: 0 });
    expect(mirrorView(r.db)).toEqual(directoryView(r.standIn));
  });

  it('a candidate whose resolve keeps failing is not deleted, and is settled by a later run', async () => {
    const r = await start(1_000);
    await r.sync();
    const gone = [...directoryView(r.standIn).keys()].slice(0, 2);
    r.standIn.directory.delete(gone);
    r.standIn.faults.failNext({ status: 503, pathPrefix: '/v2/user/resolve', times: 100 });
    const first = await r.sync({ pageAttempts: 2 });
    expect(first).toMatchObject({ status: 'succeeded', candidates: 2, unverified: 2, confirmedGone: 0, deleted: 0 });
    expect(runRow(r.db, first.runId)).toMatchObject({ status: 'succeeded' });
    r.standIn.faults.clear();
    const second = await r.sync();
    expect(second).toMatchObject({ status: 'succeeded', confirmedGone: 2, deleted: 2 });
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
    expect(
      r.db.prepare('SELECT created_on, fallback_time_zone_id, ingestion_start, raw FROM users WHERE user_id = ?').get(odd.user_id),
    ).toEqual({
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

  it('a stand-in serving legacy and odd records (--legacy-records): every user mirrored and resolvable, the oddities as warnings', async () => {
    const r = await start(2_000, { legacyRecords: 0.25 });
    const summary = await r.sync();
    expect(summary).toMatchObject({ status: 'succeeded', rejected: 0, created: 2_000 });
    // Same users, same records as received (sources with an empty or no descriptor are not mapped).
    const rawOf = (view: Map<string, { raw: string }>) => new Map([...view].map(([id, v]) => [id, v.raw]));
    expect(rawOf(mirrorView(r.db))).toEqual(rawOf(directoryView(r.standIn)));
    const warned = r.db
      .prepare<[], { user_id: string; client_user_id: string }>(
        'SELECT DISTINCT w.user_id, u.client_user_id FROM field_warnings AS w JOIN users AS u USING (user_id)',
      )
      .all();
    expect(warned.length).toBeGreaterThan(50);
    for (const { user_id, client_user_id } of warned.slice(0, 5)) {
      const online = await r.client.resolveUser(client_user_id);
      expect(online.found && online.user.user_id).toBe(user_id);
      expect(online.found && online.warnings.length).toBeGreaterThan(0);
    }
  });

  it('a record without a valid identity is set aside and does not hold back the deletions of others', async () => {
    const bad = { user_id: 'not-a-uuid', team_id: 'also-not', client_user_id: 'cu_bad', connected_sources: [] };
    const r = await start(1_200, { records: [bad] });
    await r.sync();
    // The file record comes first in the directory: delete generated users only.
    r.standIn.directory.delete([...directoryView(r.standIn).keys()].slice(10, 14));
    const summary = await r.sync();
    expect(summary).toMatchObject({ status: 'succeeded', rejected: 1, deleted: 4 });
    const rejected = r.db
      .prepare<[number], { reason: string; raw: string }>('SELECT reason, raw FROM rejected_records WHERE run_id = ?')
      .all(summary.runId);
    expect(rejected).toHaveLength(1);
    expect(rejected[0]?.reason).toMatch(/users\[0\]\.user_id/);
    expect(JSON.parse(rejected[0]?.raw ?? 'null')).toEqual(bad);
  });
});

describe('what the pages carry besides users', () => {
  it('logs envelope keys it does not use once per run, and carries on', async () => {
    const r = await start(1_200);
    const lines: string[] = [];
    const sink = new Writable({
      write: (chunk, _enc, done) => {
        lines.push(String(chunk));
        done();
      },
    });
    // The stand-in sends today's envelope; a newer service may add keys (a cursor, say). Only
    // the envelope is dressed up here: every page still comes from the stand-in over HTTP.
    const client = {
      listUserRecords: async (params: PageParams, signal?: AbortSignal) => ({
        ...(await r.client.listUserRecords(params, signal)),
        unknownKeys: ['next_cursor'],
      }),
      resolveUser: (id: string, signal?: AbortSignal) => r.client.resolveUser(id, signal),
    };
    const summary = await r.sync({ client, logger: createLogger({ LOG_LEVEL: 'info' }, sink) });
    expect(summary).toMatchObject({ status: 'succeeded', usersSeen: 1_200 });
    const events = lines
      .map((l) => JSON.parse(l) as { event?: string; keys?: string[] })
      .filter((e) => e.event === 'sync.unknown_envelope_keys');
    expect(events).toEqual([expect.objectContaining({ keys: ['next_cursor'] })]);
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
        // After page 0: the next list request fails for good (a 422 is not retried; a 401 would fail the run).
        r.standIn.faults.failNext({ status: 422, pathPrefix: '/v2/user' });
      },
    });
    expect(summary).toMatchObject({ status: 'partial', pageFailures: 1, deleted: 0, updated: 1 });
    expect(summary.reason).toMatch(/1 page\(s\) failed.*\(first: offset \d+: .*HTTP 422/);
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
    // Page 0's three attempts, and one at the page asked for beside it from the last total (1,000 users).
    expect(r.standIn.counts.get('list', 503)).toBe(3 + 1);
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
    expect(summary).toMatchObject({ status: 'partial', updated: 1, deleted: 0 });
    // Page 0, and the page asked for beside it from the last total when it was answered before the service went down.
    expect(summary.pages).toBeGreaterThanOrEqual(1);
    expect(summary.pages).toBeLessThanOrEqual(2);
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
      const summary = await runSync({ client, writer: r.writer, backoff: FAST_BACKOFF, pageAttempts: 2, pageRetryBudgetMs: 0 });
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
