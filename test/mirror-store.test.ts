import { describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { checkpointMirror, type Db } from '../db/open.js';
import { RunWriter, sqliteRunWriter } from '../src/sync/run-writer.js';
import type { PublishResult } from '../db/mirror-store.js';
import type { StagedRecord } from '../db/mirrored-user.js';
import type { RefreshResult } from '../db/user-refresh.js';
import { contentHash } from '../db/user-row.js';
import {
  OTHER_TEAM,
  pageOf,
  range,
  staged,
  stagedUsers,
  steppingClock,
  userId,
  useTempMirror,
  wireUser,
  type TempDir,
} from './support/mirror-fixtures.js';

let dir: TempDir;
let db: Db;
let writer: RunWriter;
let refresh: (record: StagedRecord) => RefreshResult;

useTempMirror((m) => {
  ({ dir, db, writer, refresh } = m);
});

/** One complete run: stage the pages, publish, finish. */
function sync(pages: StagedRecord[][], sweep = true): PublishResult & { runId: number } {
  const runId = writer.beginRun();
  for (const page of pages) writer.stagePage(runId, pageOf(page), 0);
  const result = writer.publish(
    runId,
    sweep
      ? { deletionsChecked: true, deletions: writer.pickUnseenActive(runId, Infinity).map((u) => u.user_id) }
      : { deletionsChecked: false, deletions: [] },
  );
  writer.finishRun(runId, { status: sweep ? 'succeeded' : 'partial', pages: pages.length, usersSeen: pages.flat().length, ...result });
  return { ...result, runId };
}

interface UserState {
  user_id: string;
  client_user_id: string;
  deleted_at: string | null;
  first_seen_at: string;
  last_seen_at: string;
  raw: string;
}
const user = (n: number) => db.prepare('SELECT * FROM users WHERE user_id = ?').get(userId(n)) as UserState | undefined;
const changes = (runId: number | null) =>
  db.prepare('SELECT user_id, change FROM user_changes WHERE run_id IS ? ORDER BY user_id, id').all(runId) as {
    user_id: string;
    change: string;
  }[];
const active = () => db.prepare('SELECT count(*) FROM active_users').pluck().get();

describe('stagePage + publish', () => {
  it('creates users with their sources and one change row each', () => {
    const r = sync([stagedUsers([1, 2, 3]), stagedUsers([4])]);
    expect(r).toMatchObject({ created: 4, updated: 0, deleted: 0, superseded: 0 });
    expect(active()).toBe(4);
    expect(changes(r.runId)).toEqual(range(1, 5).map((n) => ({ user_id: userId(n), change: 'created' })));
    const u1 = user(1);
    expect(u1?.raw).toBe(JSON.stringify(wireUser(1)));
    expect(u1?.first_seen_at).toBe(u1?.last_seen_at);
    expect(db.prepare('SELECT slug, name, logo, descriptor FROM connected_sources WHERE user_id = ?').all(userId(1))).toEqual([
      { slug: 'oura', name: 'Oura', logo: 'https://cdn.example/logos/oura.png', descriptor: 'provider' },
    ]);
    const run = db.prepare('SELECT * FROM sync_runs WHERE id = ?').get(r.runId) as Record<string, unknown>;
    expect(run).toMatchObject({ status: 'succeeded', created: 4, swept: 1, pages: 2, users_seen: 4 });
    expect(run.published_at).not.toBeNull();
    expect(run.finished_at).not.toBeNull();
  });

  it('loads an empty mirror in bulk: same schema afterwards, key conflicts resolved', () => {
    const schema = () => db.prepare(`SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY name`).all();
    const before = schema();
    const r = sync([stagedUsers([1, 2]), stagedUsers([3], () => ({ client_user_id: 'client-1' }))]);
    expect(r).toMatchObject({ created: 2, deleted: 0 });
    expect(schema()).toEqual(before);
    expect(user(1)?.deleted_at).not.toBeNull();
    expect(user(3)?.deleted_at).toBeNull();
    expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
    expect(db.prepare('SELECT count(*) FROM connected_sources').pluck().get()).toBe(3);
  });

  it("settles a first sync's repeat listings at the publish: the latest listing, its sources and its warnings", () => {
    const garmin = { logo: 'https://cdn.example/logos/garmin.png', name: 'Garmin', slug: 'garmin' };
    const twoSources = wireUser(2).connected_sources as unknown[];
    const earlier = stagedUsers([2], () => ({
      ingestion_start: 'not a date',
      ingestion_end: 'nor this',
      connected_sources: [...twoSources, { created_on: '2026-01-12T12:39:40Z', provider: garmin, source: garmin }],
    }));
    const later = stagedUsers([2], () => ({ ingestion_start: 'still not a date' }));
    const r = sync([
      [...stagedUsers([1]), ...earlier],
      [...later, ...stagedUsers([3])],
    ]);
    expect(r).toMatchObject({ created: 3, deleted: 0, repeats: 1 });
    expect(db.prepare('SELECT count(*) FROM users WHERE user_id = ?').pluck().get(userId(2))).toBe(1);
    expect(user(2)?.raw).toBe(later[0]?.rawJson);
    expect(db.prepare('SELECT slug FROM connected_sources WHERE user_id = ? ORDER BY slug').pluck().all(userId(2))).toEqual(['oura']);
    expect(db.prepare('SELECT field, run_id FROM field_warnings WHERE user_id = ?').all(userId(2))).toEqual([
      { field: 'ingestion_start', run_id: r.runId },
    ]);
    expect(changes(r.runId)).toEqual([1, 2, 3].map((n) => ({ user_id: userId(n), change: 'created' })));
    expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
    // Nothing waits in the TEMP tables for the next run.
    expect(db.prepare('SELECT (SELECT count(*) FROM bulk_sources) + (SELECT count(*) FROM bulk_warnings)').pluck().get()).toBe(0);
  });

  it('publishes without copying the WAL into the file; the checkpoint after it does, and readers see the run either way', () => {
    // More than SQLite's default auto-checkpoint (1,000 pages of WAL), which would copy it on COMMIT.
    sync(range(0, 40).map((p) => stagedUsers(range(p * 500 + 1, p * 500 + 501))));
    const reader = new Database(dir.file('mirror.db'), { readonly: true });
    try {
      expect(reader.prepare('SELECT count(*) FROM users').pluck().get()).toBe(20_000);
      const first = checkpointMirror(db);
      expect(first.walFrames).toBeGreaterThan(0);
      expect(first).toMatchObject({ busy: false, copiedFrames: first.walFrames });
      expect(first.walFrames).toBeGreaterThan(1_000);
      expect(checkpointMirror(db).walFrames).toBe(0);
      expect(reader.prepare('SELECT count(*) FROM users').pluck().get()).toBe(20_000);
    } finally {
      reader.close();
    }
  });

  it('stages only what changed, and writes nothing for an unchanged re-sync', () => {
    sync([stagedUsers(range(1, 11))]);
    const before = user(1);
    const runId = writer.beginRun();
    const counts = writer.stagePage(runId, pageOf(stagedUsers(range(1, 11), (n) => (n === 5 ? { ingestion_end: '2026-12-31' } : {}))), 0);
    expect(counts).toEqual({ seen: 10, changed: 1, duplicates: 0, rejected: 0, fresh: 10, notDistinct: 0 });
    expect(
      writer.publish(runId, { deletionsChecked: true, deletions: writer.pickUnseenActive(runId, Infinity).map((u) => u.user_id) }),
    ).toMatchObject({ created: 0, updated: 1, deleted: 0 });
    expect(changes(runId)).toEqual([{ user_id: userId(5), change: 'updated' }]);
    expect(user(5)?.raw).toContain('2026-12-31');
    expect(db.prepare('SELECT ingestion_end FROM users WHERE user_id = ?').pluck().get(userId(5))).toBe('2026-12-31');
    expect(user(1)).toEqual(before);

    const again = sync([stagedUsers(range(1, 11), (n) => (n === 5 ? { ingestion_end: '2026-12-31' } : {}))]);
    expect(again).toMatchObject({ created: 0, updated: 0, deleted: 0 });
    expect(changes(again.runId)).toEqual([]);
  });

  it('keeps first_seen_at and moves last_seen_at when a user changes', () => {
    sync([stagedUsers([1])]);
    const first = user(1);
    sync([stagedUsers([1], () => ({ client_user_id: 'renamed' }))]);
    const second = user(1);
    expect(second?.first_seen_at).toBe(first?.first_seen_at);
    expect(second && first && second.last_seen_at > first.last_seen_at).toBe(true);
    expect(second?.client_user_id).toBe('renamed');
  });

  it('replaces a changed user’s sources', () => {
    sync([stagedUsers([1])]);
    const garmin = { slug: 'garmin', name: 'Garmin', logo: 'https://l/garmin.png' };
    sync([[staged(wireUser(1, { connected_sources: [{ created_on: '2026-01-01T00:00:00Z', provider: garmin, source: garmin }] }))]]);
    expect(db.prepare('SELECT slug FROM connected_sources WHERE user_id = ?').pluck().all(userId(1))).toEqual(['garmin']);
  });

  it('soft-deletes unseen users when told they are gone, and only then', () => {
    sync([stagedUsers(range(1, 6))]);
    const kept = sync([stagedUsers([1, 2, 3])], false);
    expect(kept).toMatchObject({ deleted: 0 });
    expect(active()).toBe(5);

    const runId = writer.beginRun();
    writer.stagePage(runId, pageOf(stagedUsers([1, 2, 3])), 0);
    expect(writer.countUnseenActive(runId)).toBe(2);
    expect(
      writer.publish(runId, { deletionsChecked: true, deletions: writer.pickUnseenActive(runId, Infinity).map((u) => u.user_id) }),
    ).toMatchObject({ created: 0, updated: 0, deleted: 2, superseded: 0 });
    expect(changes(runId)).toEqual([
      { user_id: userId(4), change: 'deleted' },
      { user_id: userId(5), change: 'deleted' },
    ]);
    expect(active()).toBe(3);
    expect(user(4)?.deleted_at).not.toBeNull();
    expect(db.prepare('SELECT count(*) FROM connected_sources WHERE user_id = ?').pluck().get(userId(4))).toBe(1);
  });

  it('deletes only the confirmed users that are still active, and records that deletions were settled', () => {
    sync([stagedUsers(range(1, 6))]);
    const runId = writer.beginRun();
    writer.stagePage(runId, pageOf(stagedUsers([1, 2])), 0);
    // 3 and 4 confirmed gone; 5 was skipped by the listing and found alive; an id the mirror never held is ignored.
    const result = writer.publish(runId, { deletionsChecked: true, deletions: [userId(3), userId(4), userId(99)] });
    expect(result).toMatchObject({ created: 0, updated: 0, deleted: 2, superseded: 0 });
    expect(changes(runId)).toEqual([
      { user_id: userId(3), change: 'deleted' },
      { user_id: userId(4), change: 'deleted' },
    ]);
    expect(user(5)?.deleted_at).toBeNull();
    expect(user(99)).toBeUndefined();
    expect(db.prepare('SELECT swept FROM sync_runs WHERE id = ?').pluck().get(runId)).toBe(1);
  });

  it('deletes only users active at the start and still active: not those created or deleted online meanwhile', () => {
    sync([stagedUsers(range(1, 5))]);
    const runId = writer.beginRun();
    writer.stagePage(runId, pageOf(stagedUsers([1])), 0);
    const created = staged(wireUser(9));
    refresh(created);
    const thief = staged(wireUser(8, { client_user_id: 'client-2' }));
    expect(refresh(thief).superseded).toEqual([userId(2)]);
    expect(writer.countUnseenActive(runId)).toBe(3);
    expect(
      writer
        .pickUnseenActive(runId, 10)
        .map((u) => u.user_id)
        .sort(),
    ).toEqual([userId(2), userId(3), userId(4)]);
    expect(
      writer.publish(runId, { deletionsChecked: true, deletions: writer.pickUnseenActive(runId, Infinity).map((u) => u.user_id) }),
    ).toMatchObject({ deleted: 2 });
    expect(changes(runId)).toEqual([
      { user_id: userId(3), change: 'deleted' },
      { user_id: userId(4), change: 'deleted' },
    ]);
    expect(user(9)?.deleted_at).toBeNull();
    expect(user(8)?.deleted_at).toBeNull();
  });

  it('restores a deleted user that reappears, as a change "created", keeping first_seen_at', () => {
    sync([stagedUsers([1, 2])]);
    const firstSeen = user(2)?.first_seen_at;
    sync([stagedUsers([1])]);
    expect(user(2)?.deleted_at).not.toBeNull();
    const back = sync([stagedUsers([1, 2])]);
    expect(back).toMatchObject({ created: 1, updated: 0, deleted: 0 });
    expect(changes(back.runId)).toEqual([{ user_id: userId(2), change: 'created' }]);
    expect(user(2)?.deleted_at).toBeNull();
    expect(user(2)?.first_seen_at).toBe(firstSeen);
  });

  it('lets a new user take a deleted user’s client_user_id; both rows stay', () => {
    sync([stagedUsers([1])]);
    sync([[]]);
    const r = sync([stagedUsers([2], () => ({ client_user_id: 'client-1' }))]);
    expect(r).toMatchObject({ created: 1, deleted: 0 });
    expect(db.prepare('SELECT count(*) FROM users WHERE client_user_id = ?').pluck().get('client-1')).toBe(2);
  });

  it('supersedes the active holder of a client_user_id claimed by a new user, even without sweep', () => {
    sync([stagedUsers([1, 2])]);
    const r = sync([stagedUsers([3], () => ({ client_user_id: 'client-1' }))], false);
    expect(r).toMatchObject({ created: 1, deleted: 1, superseded: 1 });
    expect(user(1)?.deleted_at).not.toBeNull();
    expect(user(2)?.deleted_at).toBeNull();
    expect(changes(r.runId)).toEqual([
      { user_id: userId(1), change: 'deleted' },
      { user_id: userId(3), change: 'created' },
    ]);
  });

  it('swaps client_user_ids between two users in one publish', () => {
    sync([stagedUsers([1, 2])]);
    const r = sync([[staged(wireUser(1, { client_user_id: 'client-2' })), staged(wireUser(2, { client_user_id: 'client-1' }))]]);
    expect(r).toMatchObject({ created: 0, updated: 2, deleted: 0 });
    expect(user(1)?.client_user_id).toBe('client-2');
    expect(user(2)?.client_user_id).toBe('client-1');
    expect(active()).toBe(2);
  });

  it('resolves two listed users with one key: the later listing wins, the other is kept deleted', () => {
    sync([stagedUsers([1])]);
    const r = sync([stagedUsers([1]), stagedUsers([2], () => ({ client_user_id: 'client-1' }))]);
    expect(r).toMatchObject({ created: 1, deleted: 1, superseded: 1 });
    expect(user(1)?.deleted_at).not.toBeNull();
    expect(user(2)?.deleted_at).toBeNull();

    const fresh = sync([stagedUsers([7], () => ({ client_user_id: 'x' })), stagedUsers([8], () => ({ client_user_id: 'x' }))], false);
    expect(fresh).toMatchObject({ created: 1, deleted: 0 });
    expect(user(7)?.deleted_at).not.toBeNull();
    expect(user(8)?.deleted_at).toBeNull();
  });

  it('counts the distinct users of a first sync, whose repeats the publish drops', () => {
    const runId = writer.beginRun();
    expect(writer.stagePage(runId, pageOf(stagedUsers([1, 2, 3])), 0)).toMatchObject({ seen: 3, fresh: 3 });
    expect(writer.stagePage(runId, pageOf(stagedUsers([2, 3, 4])), 3)).toMatchObject({ seen: 3, fresh: 1 });
    expect(writer.distinctSeen(runId)).toBe(4);
    expect(writer.publish(runId, { deletionsChecked: false, deletions: [] })).toMatchObject({ created: 4, repeats: 2 });
    writer.finishRun(runId, { status: 'succeeded', pages: 2, usersSeen: 4 });
  });

  it('keeps teams apart: the same client_user_id in two teams is two active users', () => {
    const r = sync([[staged(wireUser(1)), staged(wireUser(2, { client_user_id: 'client-1', team_id: OTHER_TEAM }))]]);
    expect(r).toMatchObject({ created: 2, deleted: 0 });
    expect(active()).toBe(2);
  });

  it('counts a user listed twice as a duplicate, keeping its latest listing', () => {
    sync([stagedUsers([1, 2])]);
    const runId = writer.beginRun();
    expect(writer.stagePage(runId, pageOf(stagedUsers([1, 2])), 0)).toEqual({
      seen: 2,
      changed: 0,
      duplicates: 0,
      rejected: 0,
      fresh: 2,
      notDistinct: 0,
    });
    expect(writer.stagePage(runId, pageOf(stagedUsers([2, 3], () => ({ ingestion_end: '2030-01-01' }))), 0)).toEqual({
      seen: 2,
      changed: 2,
      duplicates: 1,
      rejected: 0,
      fresh: 1,
      notDistinct: 0,
    });
    // Within one page too; and a later unchanged listing withdraws the staged change.
    expect(writer.stagePage(runId, pageOf([...stagedUsers([4, 4]), ...stagedUsers([2])]), 0)).toEqual({
      seen: 3,
      changed: 2,
      duplicates: 2,
      rejected: 0,
      fresh: 1,
      notDistinct: 1,
    });
    expect(writer.distinctSeen(runId)).toBe(4);
    expect(writer.publish(runId, { deletionsChecked: false, deletions: [] })).toMatchObject({ created: 2, updated: 0 });
    expect(user(2)?.raw).not.toContain('2030-01-01');
    writer.finishRun(runId, { status: 'partial', pages: 3, usersSeen: 4 });
    expect(db.prepare('SELECT duplicates FROM sync_runs WHERE id = ?').pluck().get(runId)).toBe(3);
  });

  it('stores rejected records with reason and raw, and never makes their users deletion candidates', () => {
    sync([stagedUsers([1, 2])]);
    const runId = writer.beginRun();
    const bad = { ...wireUser(2), team_id: 'not-a-team' };
    expect(writer.stagePage(runId, pageOf([...stagedUsers([1]), bad, 'not an object']), 0)).toMatchObject({ seen: 1, rejected: 2 });
    expect(writer.countUnseenActive(runId)).toBe(0);
    expect(
      writer.publish(runId, { deletionsChecked: true, deletions: writer.pickUnseenActive(runId, Infinity).map((u) => u.user_id) }),
    ).toMatchObject({ deleted: 0 });
    writer.finishRun(runId, { status: 'partial', pages: 1, usersSeen: 1 });
    const rows = db
      .prepare('SELECT run_id, pass, page_offset, record_index, user_id, client_user_id, reason, raw FROM rejected_records ORDER BY id')
      .all();
    expect(rows).toEqual([
      {
        run_id: runId,
        pass: 0,
        page_offset: 0,
        record_index: 1,
        user_id: userId(2),
        client_user_id: 'client-2',
        reason: expect.stringMatching(/^users\[1\]\.team_id: /),
        raw: JSON.stringify(bad),
      },
      {
        run_id: runId,
        pass: 0,
        page_offset: 0,
        record_index: 2,
        user_id: null,
        client_user_id: null,
        reason: expect.stringMatching(/^users\[2\]/),
        raw: '"not an object"',
      },
    ]);
    expect(db.prepare('SELECT rejected FROM sync_runs WHERE id = ?').pluck().get(runId)).toBe(2);
    expect(user(2)?.deleted_at).toBeNull();
  });

  it('a failed run leaves the mirror untouched', () => {
    sync([stagedUsers([1, 2])]);
    const snapshot = db.prepare('SELECT * FROM users ORDER BY user_id').all();
    const runId = writer.beginRun();
    writer.stagePage(runId, pageOf(stagedUsers([3], () => ({}))), 0);
    writer.stagePage(runId, pageOf(stagedUsers([1], () => ({ ingestion_end: '2030-01-01' }))), 0);
    writer.finishRun(runId, { status: 'failed', pages: 0, usersSeen: 0, error: 'boom' });
    expect(db.prepare('SELECT * FROM users ORDER BY user_id').all()).toEqual(snapshot);
    expect(db.prepare('SELECT status, error FROM sync_runs WHERE id = ?').get(runId)).toEqual({ status: 'failed', error: 'boom' });
    expect(() => writer.stagePage(runId, pageOf([]), 0)).toThrow(/not the run staged/);
  });

  it('refuses to publish a run whose staging failed half-way; the run can only fail', () => {
    const runId = writer.beginRun();
    // A real SQLite failure half-way through a page: user 1 is written, user 2's insert aborts.
    db.exec(`CREATE TEMP TRIGGER full_disk BEFORE INSERT ON main.users WHEN NEW.client_user_id = 'client-2'
             BEGIN SELECT RAISE(ABORT, 'disk full'); END`);
    expect(() => writer.stagePage(runId, pageOf(stagedUsers([1, 2])), 0)).toThrow(/disk full/);
    db.exec('DROP TRIGGER temp.full_disk');
    expect(db.prepare('SELECT count(*) FROM users').pluck().get()).toBe(0);
    expect(() =>
      writer.publish(runId, { deletionsChecked: true, deletions: writer.pickUnseenActive(runId, Infinity).map((u) => u.user_id) }),
    ).toThrow(/failed to stage/);
    writer.finishRun(runId, { status: 'failed', pages: 0, usersSeen: 0, error: 'disk full' });
    expect(active()).toBe(0);
    const next = writer.beginRun();
    writer.stagePage(next, pageOf(stagedUsers([1])), 0);
    expect(writer.publish(next, { deletionsChecked: true, deletions: [] })).toMatchObject({ created: 1 });
  });

  it('refuses to publish a run twice', () => {
    const runId = writer.beginRun();
    writer.publish(runId, { deletionsChecked: false, deletions: [] });
    expect(() => writer.publish(runId, { deletionsChecked: false, deletions: [] })).toThrow(/already published/);
    expect(() => writer.stagePage(runId, pageOf(stagedUsers([1])), 0)).toThrow(/already published/);
  });

  it('picks unseen active users for the sync engine’s deletion check', () => {
    sync([stagedUsers(range(1, 21))]);
    const runId = writer.beginRun();
    writer.stagePage(runId, pageOf(stagedUsers(range(1, 16))), 0);
    const sample = writer.pickUnseenActive(runId, 3);
    expect(sample).toHaveLength(3);
    for (const s of sample) {
      expect(range(16, 21).map(userId)).toContain(s.user_id);
      expect(s.client_user_id).toBe(`client-${Number.parseInt(s.user_id.slice(-12), 16)}`);
    }
    expect(writer.pickUnseenActive(runId, 50)).toHaveLength(5);
    expect(writer.pickUnseenActive(runId, 0)).toEqual([]);
  });

  it('says "interrupted after publish" for a run that died between publish and finish', () => {
    const first = writer.beginRun();
    writer.stagePage(first, pageOf(stagedUsers([1])), 0);
    writer.publish(first, { deletionsChecked: true, deletions: writer.pickUnseenActive(first, Infinity).map((u) => u.user_id) });
    sqliteRunWriter(db, steppingClock()).beginRun();
    expect(db.prepare('SELECT status, error FROM sync_runs WHERE id = ?').get(first)).toEqual({
      status: 'failed',
      error: 'interrupted after publish',
    });
    expect(user(1)?.deleted_at).toBeNull();
  });

  it('marks a run left running by a dead process as interrupted, and starts clean', () => {
    const first = writer.beginRun(10);
    writer.stagePage(first, pageOf(stagedUsers([1])), 0);
    // The run's write transaction dies with its process; its committed row stays 'running'.
    db.exec('ROLLBACK');
    const other = sqliteRunWriter(db, steppingClock());
    const second = other.beginRun();
    expect(db.prepare('SELECT status, error, total_at_start FROM sync_runs WHERE id = ?').get(first)).toEqual({
      status: 'failed',
      error: 'interrupted',
      total_at_start: 10,
    });
    expect(db.prepare('SELECT status FROM sync_runs WHERE id = ?').pluck().get(second)).toBe('running');
  });
});

describe('refreshUser (online resolve)', () => {
  it('creates, updates, and leaves an unchanged user alone, with run_id NULL changes', () => {
    const u = staged(wireUser(1));
    expect(refresh(u)).toEqual({ change: 'created', superseded: [] });
    expect(refresh(u)).toEqual({ change: 'unchanged', superseded: [] });
    const v = staged(wireUser(1, { ingestion_end: '2030-01-01' }));
    expect(refresh(v).change).toBe('updated');
    expect(changes(null)).toEqual([
      { user_id: userId(1), change: 'created' },
      { user_id: userId(1), change: 'updated' },
    ]);
    expect(user(1)?.raw).toBe(v.rawJson);
  });

  it('restores a deleted user and supersedes another holder of the key', () => {
    sync([stagedUsers([1, 2])]);
    sync([stagedUsers([2])]);
    const back = staged(wireUser(1));
    expect(refresh(back).change).toBe('created');
    const thief = staged(wireUser(3, { client_user_id: 'client-2' }));
    expect(refresh(thief)).toEqual({ change: 'created', superseded: [userId(2)] });
    expect(user(2)?.deleted_at).not.toBeNull();
    expect(active()).toBe(2);
  });

  it('treats the same content in another key order as unchanged, keeping the listed text', () => {
    const listed = staged(wireUser(1));
    sync([[listed]]);
    const reordered = Object.fromEntries(Object.entries(wireUser(1)).reverse());
    const parsed = staged(reordered);
    expect(parsed.rawJson).not.toBe(listed.rawJson);
    expect(refresh(parsed)).toEqual({ change: 'unchanged', superseded: [] });
    expect(user(1)?.raw).toBe(listed.rawJson);
    expect(changes(null)).toEqual([]);
  });

  it('keeps the hash contract with stagePage: a refreshed record listed unchanged is not rewritten', () => {
    const u = staged(wireUser(1));
    refresh(u);
    expect(db.prepare('SELECT content_hash FROM users').pluck().get()).toBe(contentHash(u.rawJson));
    const r = sync([[u]]);
    expect(r).toMatchObject({ created: 0, updated: 0 });
  });
});

describe('scale', () => {
  it('stages and publishes 20,000 users, then re-syncs them unchanged', () => {
    const pages = Array.from({ length: 40 }, (_, p) => stagedUsers(range(p * 500, p * 500 + 500)));
    expect(sync(pages)).toMatchObject({ created: 20_000 });
    const runId = writer.beginRun();
    let changed = 0;
    for (const page of pages) changed += writer.stagePage(runId, pageOf(page), 0).changed;
    expect(changed).toBe(0);
    expect(writer.countUnseenActive(runId)).toBe(0);
    expect(
      writer.publish(runId, { deletionsChecked: true, deletions: writer.pickUnseenActive(runId, Infinity).map((u) => u.user_id) }),
    ).toMatchObject({ created: 0, updated: 0, deleted: 0 });
    expect(db.prepare('SELECT count(*) FROM connected_sources').pluck().get()).toBe(20_000);
  });
});
