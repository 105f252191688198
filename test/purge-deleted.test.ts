/**
 * DELETED_RETENTION_DAYS: users the service confirmed deleted stay, flagged,
 * for the retention, then a sync purges them with their sources and field
 * warnings; 0 keeps them for ever. The change feed and the change log keep
 * their own retention. Real sync processes against the stand-in.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { runCli } from './support/daemon-process.js';

let dir: string;
let standIn: StandIn;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-purge-'));
  standIn = await startStandIn({ port: 0, users: 300, seed: 71 });
});
afterAll(async () => {
  await standIn?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The test's mirror and a sync's environment for it (the tests share it, in order). */
function mirror(): { mirrorDb: string; env: Record<string, string> } {
  const mirrorDb = join(dir, 'mirror.db');
  return {
    mirrorDb,
    env: {
      SERVICE_BASE_URL: standIn.baseUrl,
      SERVICE_API_KEY: standIn.apiKey,
      SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
      MIRROR_DB: mirrorDb,
    },
  };
}

function query<T>(path: string, sql: string, ...params: unknown[]): T {
  const db = new Database(path);
  try {
    return db.prepare(sql).get(...params) as T;
  } finally {
    db.close();
  }
}

describe('purging deleted users', () => {
  it('keeps the recently deleted, purges those past DELETED_RETENTION_DAYS with their sources; 0 keeps all', async () => {
    const { mirrorDb, env } = mirror();
    env.SYNC_MAX_DELETE_RATIO = '0.5';
    expect((await runCli(['sync', '--once'], env, 60_000)).code).toBe(0);
    const gone = standIn.directory.page(0, 40).map((u) => ({ id: String(u.user_id), client: String(u.client_user_id) }));
    standIn.directory.delete(gone.map((g) => g.id));
    expect((await runCli(['sync', '--once'], env, 60_000)).code).toBe(0);
    expect(query<{ n: number }>(mirrorDb, 'SELECT count(*) AS n FROM users WHERE deleted_at IS NOT NULL').n).toBe(40);

    // Half of them were deleted long ago.
    const old = gone.slice(0, 20);
    const db = new Database(mirrorDb);
    const age = db.prepare(`UPDATE users SET deleted_at = '2020-01-01T00:00:00.000Z' WHERE user_id = ?`);
    for (const g of old) age.run(g.id);
    const feedBefore = (db.prepare('SELECT count(*) AS n FROM change_events').get() as { n: number }).n;
    db.close();
    const sourcesOfOld = () =>
      query<{ n: number }>(
        mirrorDb,
        `SELECT count(*) AS n FROM connected_sources WHERE user_id IN (${old.map(() => '?').join(',')})`,
        ...old.map((g) => g.id),
      ).n;
    expect(sourcesOfOld()).toBeGreaterThan(0);

    // 0: kept for ever.
    expect((await runCli(['sync', '--once'], { ...env, DELETED_RETENTION_DAYS: '0' }, 60_000)).code).toBe(0);
    expect(query<{ n: number }>(mirrorDb, 'SELECT count(*) AS n FROM users WHERE deleted_at IS NOT NULL').n).toBe(40);

    const sync = await runCli(['sync', '--once'], env, 60_000);
    expect(sync.code).toBe(0);
    expect(sync.stdout).toMatch(/"event":"mirror.purged","users":20/);
    expect(query<{ n: number }>(mirrorDb, 'SELECT count(*) AS n FROM users WHERE deleted_at IS NOT NULL').n).toBe(20);
    expect(sourcesOfOld()).toBe(0);
    expect(query<{ n: number }>(mirrorDb, 'SELECT count(*) AS n FROM users WHERE deleted_at IS NULL').n).toBe(260);
    expect(query<{ n: number }>(mirrorDb, 'SELECT count(*) AS n FROM change_events').n).toBeGreaterThanOrEqual(feedBefore);
    // Purged: not even --include-deleted finds one; a recently deleted one still is.
    const purged = await runCli(['resolve', old[0]?.client ?? '', '--include-deleted'], { MIRROR_DB: mirrorDb });
    expect(purged.code).toBe(3);
    const recent = await runCli(['resolve', gone[30]?.client ?? '', '--include-deleted'], { MIRROR_DB: mirrorDb });
    expect(recent.code).toBe(0);
  });

  it('drops change-log and rejected-record rows past CHANGE_LOG_RETENTION_DAYS, oldest first; 0 keeps them', async () => {
    const { mirrorDb, env } = mirror();
    const changes = () => query<{ n: number }>(mirrorDb, 'SELECT count(*) AS n FROM user_changes').n;
    const total = changes();
    // The oldest 100 rows were written long ago.
    const db = new Database(mirrorDb);
    db.prepare(
      `UPDATE user_changes SET at = '2020-01-01T00:00:00.000Z' WHERE id IN (SELECT id FROM user_changes ORDER BY id LIMIT 100)`,
    ).run();
    db.close();
    expect((await runCli(['sync', '--once'], { ...env, CHANGE_LOG_RETENTION_DAYS: '0' }, 60_000)).code).toBe(0);
    expect(changes()).toBe(total);
    const sync = await runCli(['sync', '--once'], { ...env, CHANGE_LOG_RETENTION_DAYS: '30' }, 60_000);
    expect(sync.code).toBe(0);
    expect(sync.stdout).toMatch(/"event":"mirror.log_purged","rows":100/);
    expect(changes()).toBe(total - 100);
    expect(query<{ n: number }>(mirrorDb, `SELECT count(*) AS n FROM user_changes WHERE at < '2021-01-01'`).n).toBe(0);
  });
});
