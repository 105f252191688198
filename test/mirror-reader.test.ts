import { describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import type { Db } from '../db/open.js';
import { RunWriter } from '../src/sync/run-writer.js';
import { latestEntry, MirrorNotReadyError, MirrorReader } from '../db/mirror-reader.js';
import { checkStoredUser } from '../src/replica/resolve.js';
import { OTHER_TEAM, pageOf, staged, stagedUsers, TEAM, userId, useTempMirror, wireUser, type TempDir } from './support/mirror-fixtures.js';

let dir: TempDir;
let db: Db;
let writer: RunWriter;
let reader: MirrorReader;

useTempMirror((m) => {
  ({ dir, db, writer } = m);
  reader = new MirrorReader(db, checkStoredUser);
});

function sync(records: ReturnType<typeof staged>[], sweep = true): number {
  const runId = writer.beginRun(records.length);
  writer.stagePage(runId, pageOf(records), 0);
  const r = writer.publish(
    runId,
    sweep
      ? { deletionsChecked: true, deletions: writer.pickUnseenActive(runId, Infinity).map((u) => u.user_id) }
      : { deletionsChecked: false, deletions: [] },
  );
  writer.finishRun(runId, {
    status: sweep ? 'succeeded' : 'partial',
    pages: 1,
    usersSeen: records.length,
    ...r,
    error: sweep ? undefined : 'drift',
  });
  return runId;
}

describe('MirrorReader.byClientUserId', () => {
  it('returns the service’s User object exactly as received, unknown fields included', () => {
    const record = wireUser(1, { brand_new_field: { nested: [1, 2] } });
    sync([staged(record)]);
    expect(reader.byClientUserId('client-1')).toEqual(record);
    expect(reader.byClientUserId('nobody')).toBeUndefined();
  });

  it('hides deleted users unless asked, and then says they are deleted', () => {
    sync(stagedUsers([1, 2]));
    sync(stagedUsers([2]));
    expect(reader.byClientUserId('client-1')).toBeUndefined();
    const entry = reader.lookup('client-1', { includeDeleted: true });
    expect(entry?.user.user_id).toBe(userId(1));
    expect(entry?.deletedAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  });

  it('prefers the active user over deleted ones with the same client_user_id, then the latest deleted', () => {
    sync(stagedUsers([1]));
    sync([staged(wireUser(2, { client_user_id: 'client-1' }))]);
    sync([staged(wireUser(3, { client_user_id: 'client-1' }))]);
    expect(reader.lookup('client-1', { includeDeleted: true })?.user.user_id).toBe(userId(3));
    sync([]);
    expect(reader.byClientUserId('client-1')).toBeUndefined();
    // All three deleted now: 3 went last.
    expect(reader.lookup('client-1', { includeDeleted: true })?.user.user_id).toBe(userId(3));
  });

  it('picks the latest entry without SQL: active first, then deleted latest, then seen latest', () => {
    const row = (name: string, deleted_at: string | null, last_seen_at: string) => ({ name, deleted_at, last_seen_at });
    const rows = [
      row('deleted early', '2026-01-01T00:00:00.000Z', '2026-03-01T00:00:00.000Z'),
      row('deleted late, seen early', '2026-02-01T00:00:00.000Z', '2025-01-01T00:00:00.000Z'),
      row('deleted late, seen late', '2026-02-01T00:00:00.000Z', '2025-06-01T00:00:00.000Z'),
    ];
    expect(latestEntry(rows)?.name).toBe('deleted late, seen late');
    expect(latestEntry([...rows, row('active', null, '2020-01-01T00:00:00.000Z')])?.name).toBe('active');
    expect(latestEntry([row('active', null, '2020-01-01T00:00:00.000Z'), ...rows])?.name).toBe('active');
    expect(latestEntry([])).toBeUndefined();
  });

  it('narrows to a team when given one', () => {
    sync([staged(wireUser(1)), staged(wireUser(2, { client_user_id: 'client-1', team_id: OTHER_TEAM }))]);
    expect(reader.byClientUserId('client-1', { teamId: OTHER_TEAM })?.user_id).toBe(userId(2));
    expect(reader.byClientUserId('client-1', { teamId: TEAM })?.user_id).toBe(userId(1));
    expect(reader.byClientUserId('client-1', { teamId: '11111111-1111-4111-8111-111111111111' })).toBeUndefined();
  });

  it('can re-validate the stored record against the wire schema', () => {
    sync(stagedUsers([1]));
    db.prepare(`UPDATE users SET raw = json_set(raw, '$.user_id', 'not-a-uuid')`).run();
    expect(reader.byClientUserId('client-1')?.user_id).toBe('not-a-uuid');
    expect(() => reader.byClientUserId('client-1', { validate: true })).toThrow(/user_id/);
  });
});

describe('MirrorReader.stats and lastRuns', () => {
  it('reports counts and the latest runs', () => {
    expect(reader.stats()).toEqual({ activeUsers: 0, deletedUsers: 0, lastRun: undefined, lastSucceededRun: undefined });
    const first = sync(stagedUsers([1, 2, 3]));
    const second = sync(stagedUsers([1]), false);
    const stats = reader.stats();
    expect(stats).toMatchObject({ activeUsers: 3, deletedUsers: 0 });
    expect(stats.lastRun).toMatchObject({ id: second, status: 'partial', swept: false, error: 'drift', usersSeen: 1 });
    expect(stats.lastSucceededRun).toMatchObject({ id: first, status: 'succeeded', swept: true, created: 3, pages: 1 });
    expect(reader.lastRuns(5).map((r) => r.id)).toEqual([second, first]);
    expect(reader.lastRuns(1)).toHaveLength(1);
  });
});

it('refuses a file that holds no mirror', () => {
  const empty = new Database(dir.file('empty.db'));
  try {
    expect(() => new MirrorReader(empty)).toThrow(MirrorNotReadyError);
  } finally {
    empty.close();
  }
});
