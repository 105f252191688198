import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { openMirror, type Db } from '../db/open.js';
import { applyMigration, migrate } from '../db/migrate.js';
import { MIGRATIONS } from '../db/migrations.js';
import { mirrorSchema } from '../db/migrations/001-mirror.js';
import { TEAM, tempDir, userId, type TempDir } from './support/mirror-fixtures.js';

const LATEST = Math.max(...MIGRATIONS.map((m) => m.version));

let dir: TempDir;
let db: Db;
beforeEach(() => {
  dir = tempDir();
  db = openMirror(dir.file('mirror.db'));
});
afterEach(() => {
  db.close();
  dir.remove();
});

function insertUser(n: number, clientUserId: string, deletedAt: string | null): void {
  db.prepare(
    `INSERT INTO users (user_id, team_id, client_user_id, raw, content_hash, first_seen_at, last_seen_at, deleted_at)
     VALUES (?, ?, ?, '{}', 'h', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z', ?)`,
  ).run(userId(n), TEAM, clientUserId, deletedAt);
}

describe('migration 1: the mirror schema', () => {
  it('is version 1 and part of the migration list', () => {
    expect(mirrorSchema.version).toBe(1);
    expect(MIGRATIONS[0]).toBe(mirrorSchema);
  });

  it('migrates to the latest version, and migrating again changes nothing', () => {
    expect(db.pragma('user_version', { simple: true })).toBe(LATEST);
    const schema = () => db.prepare('SELECT type, name, sql FROM sqlite_schema ORDER BY name').all();
    const before = schema();
    expect(migrate(db, MIGRATIONS)).toBe(LATEST);
    expect(schema()).toEqual(before);
    db.close();
    db = openMirror(dir.file('mirror.db'));
    expect(schema()).toEqual(before);
  });

  it('opens beside a running sync: a migration another process applied meanwhile is not waited for', () => {
    // The race: this process read an old version, the other migrated and began a sync (write lock held).
    db.exec('BEGIN IMMEDIATE');
    const late = openMirror(dir.file('mirror.db'), { busyTimeoutMs: 50 });
    try {
      const newest = MIGRATIONS.find((m) => m.version === LATEST);
      expect(newest).toBeDefined();
      expect(applyMigration(late, newest!)).toBe(LATEST);
      // A migration that is really missing still fails, naming the lock.
      expect(() => applyMigration(late, { version: LATEST + 1, name: 'next', sql: 'CREATE TABLE later (x)' })).toThrow(/locked/);
    } finally {
      late.close();
      db.exec('ROLLBACK');
    }
  });

  it('applies only the missing versions on a file left at version 1', () => {
    const path = dir.file('v1.db');
    const old = new Database(path);
    migrate(old, [mirrorSchema]);
    expect(old.pragma('user_version', { simple: true })).toBe(1);
    old.close();
    const reopened = openMirror(path);
    expect(reopened.pragma('user_version', { simple: true })).toBe(LATEST);
    reopened.close();
  });

  it('gives a file left at version 2 the STRICT sync_lease table at version 3', () => {
    const path = dir.file('v2.db');
    const old = new Database(path);
    migrate(
      old,
      MIGRATIONS.filter((m) => m.version <= 2),
    );
    expect(old.pragma('user_version', { simple: true })).toBe(2);
    expect(old.prepare(`SELECT count(*) FROM sqlite_schema WHERE name = 'sync_lease'`).pluck().get()).toBe(0);
    old.close();
    const reopened = openMirror(path);
    try {
      expect(reopened.pragma('user_version', { simple: true })).toBe(LATEST);
      expect(reopened.prepare(`SELECT strict FROM pragma_table_list WHERE name = 'sync_lease'`).pluck().get()).toBe(1);
      expect(reopened.prepare('SELECT count(*) FROM sync_lease').pluck().get()).toBe(0);
    } finally {
      reopened.close();
    }
  });

  it('creates STRICT tables and the documented views', () => {
    const tables = db.prepare(`SELECT name, strict FROM pragma_table_list WHERE schema = 'main'`).all() as {
      name: string;
      strict: number;
    }[];
    const strict = Object.fromEntries(tables.map((t) => [t.name, t.strict]));
    for (const t of ['users', 'connected_sources', 'sync_runs', 'user_changes', 'rejected_records', 'sync_lease', 'field_warnings'])
      expect(strict[t]).toBe(1);
    const views = db.prepare(`SELECT name FROM sqlite_schema WHERE type = 'view' ORDER BY name`).pluck().all();
    expect(views).toEqual(expect.arrayContaining(['active_users', 'last_sync', 'sources_per_user', 'users_per_source']));
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
  });

  it('STRICT rejects a wrongly typed value and CHECK an unknown status', () => {
    expect(() => db.prepare(`INSERT INTO sync_runs (started_at, pages) VALUES ('2026-01-01T00:00:00.000Z', 'many')`).run()).toThrow(
      /cannot store TEXT value in INTEGER column/,
    );
    expect(() => db.prepare(`INSERT INTO sync_runs (started_at, status) VALUES ('2026-01-01T00:00:00.000Z', 'done')`).run()).toThrow(
      /CHECK constraint failed/,
    );
  });

  it('holds one active user per (team_id, client_user_id), any number of deleted ones', () => {
    insertUser(1, 'alice', '2026-01-02T00:00:00.000Z');
    insertUser(2, 'alice', '2026-01-03T00:00:00.000Z');
    insertUser(3, 'alice', null);
    expect(() => insertUser(4, 'alice', null)).toThrow(/UNIQUE constraint failed/);
    const plan = db
      .prepare(`EXPLAIN QUERY PLAN SELECT raw FROM users WHERE client_user_id = ?`)
      .all('alice')
      .map((r) => (r as { detail: string }).detail)
      .join(' ');
    expect(plan).toMatch(/INDEX/);
  });

  it('views count active users only', () => {
    insertUser(1, 'a', null);
    insertUser(2, 'b', null);
    insertUser(3, 'c', '2026-01-02T00:00:00.000Z');
    const source = db.prepare(`INSERT INTO connected_sources (user_id, slug, name, descriptor) VALUES (?, ?, ?, 'provider')`);
    source.run(userId(1), 'oura', 'Oura');
    source.run(userId(1), 'garmin', 'Garmin');
    source.run(userId(2), 'oura', 'Oura');
    source.run(userId(3), 'oura', 'Oura');
    expect(db.prepare('SELECT count(*) FROM active_users').pluck().get()).toBe(2);
    expect(db.prepare('SELECT slug, name, active_users FROM users_per_source ORDER BY slug').all()).toEqual([
      { slug: 'garmin', name: 'Garmin', active_users: 1 },
      { slug: 'oura', name: 'Oura', active_users: 2 },
    ]);
    expect(db.prepare('SELECT client_user_id, source_count FROM sources_per_user ORDER BY client_user_id').all()).toEqual([
      { client_user_id: 'a', source_count: 2 },
      { client_user_id: 'b', source_count: 1 },
    ]);
  });
});
