import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { openMirror, type Db } from '../db/open.js';
import { RunWriter, sqliteRunWriter } from '../src/sync/run-writer.js';
import { MirrorNotReadyError } from '../db/mirror-reader.js';
import { closeResolvers, MirrorMissingError, resolveOffline, resolveOfflineMany } from '../src/replica/resolve.js';
import { pageOf, range, stagedUsers, tempDir, userId, wireUser, type TempDir } from './support/mirror-fixtures.js';

let dir: TempDir;
let path: string;
let db: Db;
let writer: RunWriter;

function sync(ns: number[]): void {
  const runId = writer.beginRun();
  writer.stagePage(runId, pageOf(stagedUsers(ns)), 0);
  writer.publish(runId, { deletionsChecked: true, deletions: writer.pickUnseenActive(runId, Infinity).map((u) => u.user_id) });
  writer.finishRun(runId, { status: 'succeeded', pages: 1, usersSeen: ns.length });
}

beforeEach(() => {
  dir = tempDir();
  path = dir.file('mirror.db');
  db = openMirror(path);
  writer = sqliteRunWriter(db);
});
afterEach(() => {
  closeResolvers();
  db.close();
  dir.remove();
});

describe('resolveOffline', () => {
  it('finds active users, hides deleted ones unless asked', () => {
    sync([1, 2]);
    sync([2]);
    expect(resolveOffline(path, 'client-2')?.user).toEqual(wireUser(2));
    expect(resolveOffline(path, 'client-1')).toBeUndefined();
    expect(resolveOffline(path, 'client-1', { includeDeleted: true })).toMatchObject({
      user: { user_id: userId(1) },
      deletedAt: expect.any(String),
    });
    expect(resolveOffline(path, 'nobody', { includeDeleted: true })).toBeUndefined();
  });

  it('returns the stored text as raw, and the same record parsed as user', () => {
    sync([1]);
    const entry = resolveOffline(path, 'client-1');
    const stored = db.prepare('SELECT raw FROM users WHERE user_id = ?').pluck().get(userId(1));
    expect(entry?.raw).toBe(stored);
    expect(entry?.user).toEqual(JSON.parse(String(stored)));
    expect(JSON.parse(JSON.stringify(entry))).toMatchObject({ raw: stored, user: wireUser(1) });
  });

  it('answers a batch of ids from one snapshot; ids not found are absent', () => {
    sync([1, 2, 3]);
    sync([2, 3]);
    const found = resolveOfflineMany(path, ['client-1', 'client-2', 'client-3', 'nobody']);
    expect([...found.keys()].sort()).toEqual(['client-2', 'client-3']);
    expect(found.get('client-3')?.user.user_id).toBe(userId(3));
    const withDeleted = resolveOfflineMany(path, ['client-1', 'client-2'], { includeDeleted: true });
    expect(withDeleted.get('client-1')?.deletedAt).toEqual(expect.any(String));
    expect(withDeleted.get('client-2')?.deletedAt).toBeNull();
  });

  it('keeps its readonly connection, and sees what a sync publishes after it opened', () => {
    sync([1]);
    expect(resolveOffline(path, 'client-2')).toBeUndefined();
    sync([1, 2]);
    expect(resolveOffline(path, 'client-2')?.user.user_id).toBe(userId(2));
  });

  it('reads a mirror whose writer has closed (which leaves -wal and -shm for readers, db/wal-pair.ts)', () => {
    sync(range(1, 50));
    db.close();
    expect(existsSync(`${path}-wal`)).toBe(true);
    expect(existsSync(`${path}-shm`)).toBe(true);
    expect(resolveOffline(path, 'client-7')?.user.user_id).toBe(userId(7));
    db = openMirror(path);
  });

  it('is not blocked by a publish in progress in the same process’s writer connection', () => {
    sync([1]);
    expect(resolveOffline(path, 'client-1')).toBeDefined();
    // A write transaction held open on the writer: WAL readers still read the last commit.
    db.exec('BEGIN IMMEDIATE');
    db.prepare(`UPDATE users SET deleted_at = '2026-01-01T00:00:00.000Z'`).run();
    expect(resolveOffline(path, 'client-1')?.deletedAt).toBeNull();
    db.exec('ROLLBACK');
  });

  it('says clearly when there is no mirror yet', () => {
    expect(() => resolveOffline(dir.file('missing.db'), 'x')).toThrow(MirrorMissingError);
    const empty = openMirror(dir.file('raw.db'), {});
    empty.pragma('user_version = 0');
    empty.close();
    expect(() => resolveOffline(dir.file('raw.db'), 'x')).toThrow(MirrorNotReadyError);
  });
});
