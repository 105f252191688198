/**
 * The change feed against a real SQLite mirror: every change a published
 * run records becomes one event, in commit order, and nothing else does.
 * The store-level cases craft pages; the churn case runs the real engine
 * against the stand-in over HTTP, run after run.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ChangeEventSchema, type ChangeEvent } from '../db/change-event.js';
import { ChangeFeed } from '../db/change-feed.js';
import type { Db } from '../db/open.js';
import type { PublishResult } from '../db/mirror-store.js';
import type { StagedRecord } from '../db/mirrored-user.js';
import type { RefreshResult } from '../db/user-refresh.js';
import { sqliteRunWriter, type RunWriter } from '../src/sync/run-writer.js';
import { pageOf, range, stagedUsers, steppingClock, userId, useTempMirror, wireUser, staged } from './support/mirror-fixtures.js';
import { createSyncRig, type SyncRig } from './support/sync-rig.js';

let db: Db;
let writer: RunWriter;
let refresh: (record: StagedRecord) => RefreshResult;

useTempMirror((m) => {
  ({ db, writer, refresh } = m);
});

function sync(pages: StagedRecord[][], w: RunWriter = writer): PublishResult & { runId: number } {
  const runId = w.beginRun();
  for (const page of pages) w.stagePage(runId, pageOf(page), 0);
  const result = w.publish(runId, { deletionsChecked: true, deletions: w.pickUnseenActive(runId, Infinity).map((u) => u.user_id) });
  w.finishRun(runId, { status: 'succeeded', pages: pages.length, usersSeen: pages.flat().length, ...result });
  return { ...result, runId };
}

/** Every event after `after`, parsed and checked against the schema. */
function events(after = 0): ChangeEvent[] {
  const page = new ChangeFeed(db).page(after, 100_000);
  if (page.gone) throw new Error('feed gone');
  return page.events.map((e) => ChangeEventSchema.parse(JSON.parse(e.body)));
}

const brief = (e: ChangeEvent) => ({ type: e.type, user: 'user_id' in e.data ? e.data.user_id : null, run: e.run_id });

describe('a run’s events', () => {
  it('a first sync into an empty mirror is one baseline marker by default, with the count', () => {
    const r = sync([stagedUsers([1, 2, 3])]);
    const all = events();
    expect(all).toHaveLength(1);
    expect(all[0]).toMatchObject({ type: 'mirror.baseline', run_id: r.runId, cursor: 1, data: { users: 3 } });
    expect(all[0]?.timestamp).toBe(db.prepare('SELECT published_at FROM sync_runs WHERE id = ?').pluck().get(r.runId));
  });

  it('with CHANGES_BASELINE=events a first sync emits user.created per user, with the record as mirrored', () => {
    const w = sqliteRunWriter(db, steppingClock(), { baseline: 'events' });
    const r = sync([stagedUsers([1, 2, 3])], w);
    const all = events();
    expect(all.map(brief)).toEqual([1, 2, 3].map((n) => ({ type: 'user.created', user: userId(n), run: r.runId })));
    const first = all[0];
    if (first?.type !== 'user.created') throw new Error('expected user.created');
    expect(first.data.user).toEqual(wireUser(1));
    expect(first.data).toMatchObject({ team_id: wireUser(1).team_id, client_user_id: 'client-1' });
  });

  it('updates name the changed top-level fields and the sources gained and lost', () => {
    sync([stagedUsers([1, 2])]);
    const garmin = { logo: null, name: 'Garmin', slug: 'garmin' };
    const r = sync([
      stagedUsers([1], () => ({
        ingestion_end: '2026-12-31',
        connected_sources: [{ created_on: '2026-02-01T00:00:00Z', provider: garmin, source: garmin }],
      })),
      stagedUsers([2]),
    ]);
    const [e, ...rest] = events(1);
    expect(rest).toEqual([]);
    expect(e).toMatchObject({
      type: 'user.updated',
      run_id: r.runId,
      data: {
        user_id: userId(1),
        changed_fields: ['connected_sources', 'ingestion_end'],
        sources_added: ['garmin'],
        sources_removed: ['oura'],
        // The values before the run, of the changed fields only.
        previous: { connected_sources: wireUser(1).connected_sources, ingestion_end: null },
      },
    });
  });

  it('a key order change alone is an update with no changed field (the bytes changed, the content did not)', () => {
    sync([stagedUsers([1])]);
    const { user_id, ...rest } = wireUser(1);
    sync([[staged({ ...rest, user_id })]]);
    expect(events(1).map((e) => (e.type === 'user.updated' ? e.data.changed_fields : e.type))).toEqual([[]]);
  });

  it('deletions say verified or superseded; a deleted user listed again is restored', () => {
    sync([stagedUsers([1, 2, 3])]);
    const gone = sync([stagedUsers([1, 3])]);
    const took = sync([stagedUsers([1]), stagedUsers([4], () => ({ client_user_id: 'client-3' }))]);
    const back = sync([stagedUsers([1, 2]), stagedUsers([4], () => ({ client_user_id: 'client-3' }))]);
    expect(events(1).map((e) => ({ ...brief(e), reason: e.type === 'user.deleted' ? e.data.reason : undefined }))).toEqual([
      { type: 'user.deleted', user: userId(2), run: gone.runId, reason: 'verified' },
      { type: 'user.deleted', user: userId(3), run: took.runId, reason: 'superseded' },
      { type: 'user.created', user: userId(4), run: took.runId, reason: undefined },
      { type: 'user.restored', user: userId(2), run: back.runId, reason: undefined },
    ]);
    const deleted = events(1)[0];
    expect(deleted?.data).toMatchObject({ client_user_id: 'client-2', user: null });
  });

  it('a run that is rolled back emits nothing, and the next run’s cursors follow on', () => {
    sync([stagedUsers([1, 2])]);
    const failed = writer.beginRun();
    writer.stagePage(failed, pageOf(stagedUsers([1, 2, 3], (n) => ({ ingestion_end: `2026-0${n}-01` }))), 0);
    writer.finishRun(failed, { status: 'failed', pages: 1, usersSeen: 3, error: 'test' });
    expect(events(1)).toEqual([]);
    sync([stagedUsers([1, 2, 5])]);
    expect(events(1).map((e) => [e.cursor, e.type])).toEqual([[2, 'user.created']]);
  });

  it('an online resolve’s change is an event too (run_id null), superseded holder first', () => {
    sync([stagedUsers([1, 2])]);
    refresh(staged(wireUser(9, { client_user_id: 'client-2' })));
    expect(events(1).map(brief)).toEqual([
      { type: 'user.deleted', user: userId(2), run: null },
      { type: 'user.created', user: userId(9), run: null },
    ]);
  });

  it('has one event per user_changes row, in the order of commit, ids unique', () => {
    sync([stagedUsers(range(1, 30))]);
    for (let k = 0; k < 5; k++)
      sync([stagedUsers(range(1 + k, 30 + 2 * k), (n) => (n % 5 === k ? { ingestion_end: `2026-01-0${k + 1}` } : {}))]);
    const rows = db.prepare('SELECT run_id, user_id, change FROM user_changes WHERE run_id > 1 ORDER BY id').all() as {
      run_id: number;
      user_id: string;
      change: string;
    }[];
    const all = events(1);
    expect(all.map((e) => ({ run: e.run_id, user: 'user_id' in e.data ? e.data.user_id : null }))).toEqual(
      rows.map((r) => ({ run: r.run_id, user: r.user_id })),
    );
    expect(new Set(all.map((e) => e.id)).size).toBe(all.length);
    expect(all.map((e) => e.cursor)).toEqual(all.map((_, i) => i + 2));
  });
});

describe('paging and retention', () => {
  it('pages by cursor and answers gone below what retention dropped', () => {
    sync([stagedUsers([1])]);
    for (let k = 0; k < 6; k++) sync([stagedUsers([1], () => ({ ingestion_end: `2026-01-0${k + 1}` }))]);
    const feed = new ChangeFeed(db);
    const first = feed.page(0, 3);
    expect(first.gone ? [] : first.events.map((e) => e.cursor)).toEqual([1, 2, 3]);
    expect(first.gone ? -1 : first.next).toBe(3);
    const end = feed.page(7, 3);
    expect(end).toEqual({ gone: false, events: [], next: 7 });
    // Everything is older than a cutoff in the future; the hold keeps cursors above 4.
    expect(feed.prune('9999-01-01T00:00:00.000Z', 4)).toBe(4);
    expect(feed.page(2, 10)).toEqual({ gone: true, oldest: 4 });
    const after = feed.page(4, 10);
    expect(after.gone ? [] : after.events.map((e) => e.cursor)).toEqual([5, 6, 7]);
    expect(feed.bounds()).toMatchObject({ latest: 7, oldest: 5, prunedThrough: 4 });
  });

  it("gives a webhook an event's body by cursor and id: none for another id at that cursor, nor once dropped", () => {
    sync([stagedUsers([1])]);
    for (let k = 0; k < 3; k++) sync([stagedUsers([1], () => ({ ingestion_end: `2026-02-0${k + 1}` }))]);
    const feed = new ChangeFeed(db);
    const page = feed.page(0, 10);
    const [, second, third] = page.gone ? [] : page.events;
    if (second === undefined || third === undefined) throw new Error('three events expected');
    expect(feed.body(second.cursor, second.id)).toBe(second.body);
    // The same cursor under another epoch (a rebuilt mirror) is another event: nothing to send.
    expect(feed.body(second.cursor, second.id.replace(/^evt_[0-9a-f]+_/, 'evt_0_'))).toBeUndefined();
    expect(feed.body(second.cursor, third.id)).toBeUndefined();
    feed.prune('9999-01-01T00:00:00.000Z', second.cursor);
    expect(feed.body(second.cursor, second.id)).toBeUndefined();
    expect(feed.body(third.cursor, third.id)).toBe(third.body);
  });
});

describe('churn against the stand-in', () => {
  let rig: SyncRig | undefined;
  afterEach(async () => {
    await rig?.close();
    rig = undefined;
  });

  it('adds, updates, deletions and restores, run after run: exactly the events user_changes says, in order', async () => {
    rig = await createSyncRig({ users: 1_500 });
    const r = rig;
    await r.sync();
    let seed = 7;
    const rand = (n: number) => {
      seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
      return seed % n;
    };
    const deleted: string[] = [];
    for (let run = 0; run < 6; run++) {
      const ids = r.db.prepare('SELECT user_id FROM active_users ORDER BY user_id').pluck().all() as string[];
      const goners = Array.from({ length: 5 + rand(20) }, () => ids[rand(ids.length)] ?? '');
      r.standIn.directory.delete(goners);
      deleted.push(...goners);
      r.standIn.directory.add(rand(30));
      for (let k = rand(40); k > 0; k--) r.standIn.directory.update(ids[rand(ids.length)] ?? '');
      if (run >= 2) r.standIn.directory.restore(deleted.splice(0, rand(8) + 1));
      const summary = await r.sync();
      expect(summary.status).toBe('succeeded');
    }
    const rows = r.db
      .prepare(`SELECT c.run_id, c.user_id, c.change, c.cause FROM user_changes c WHERE c.run_id > 1 ORDER BY c.id`)
      .all() as { run_id: number; user_id: string; change: string; cause: string | null }[];
    const feed = new ChangeFeed(r.db).page(1, 1_000_000);
    if (feed.gone) throw new Error('gone');
    const got = feed.events.map((e) => ChangeEventSchema.parse(JSON.parse(e.body)));
    expect(got.map((e) => ({ run: e.run_id, user: 'user_id' in e.data ? e.data.user_id : null }))).toEqual(
      rows.map((x) => ({ run: x.run_id, user: x.user_id })),
    );
    const kinds = new Set(got.map((e) => e.type));
    expect(kinds).toEqual(new Set(['user.created', 'user.updated', 'user.deleted', 'user.restored']));
    for (const [i, e] of got.entries()) {
      const row = rows[i];
      if (row === undefined) throw new Error('missing row');
      if (e.type === 'user.updated') expect(e.data.changed_fields).toEqual(['fallback_time_zone']);
      if (e.type === 'user.deleted') expect(e.data.reason).toBe('verified');
      if (e.type === 'user.created' || e.type === 'user.restored') expect(row.change).toBe('created');
      if (e.type !== 'user.deleted' && e.type !== 'mirror.baseline' && e.type !== 'mirror.restored') {
        const raw = r.db.prepare('SELECT raw FROM users WHERE user_id = ?').pluck().get(e.data.user_id) as string;
        const latest = got.findLast((x) => 'user_id' in x.data && x.data.user_id === e.data.user_id && x.type !== 'user.deleted');
        if (latest === e) expect(e.data.user).toEqual(JSON.parse(raw));
      }
    }
  });
});
