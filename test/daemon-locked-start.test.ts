/**
 * A daemon that starts while another process's sync holds the mirror's write
 * lock, on a file that needs a migration (so the open needs the lock): it
 * waits and says so, rather than exit into a pm2 restart loop, and becomes
 * ready once the lock is released.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../db/migrate.js';
import { MIGRATIONS } from '../db/migrations/index.js';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { startTestRedis, freePort, type TestRedis } from './support/redis-server.js';
import { daemonEnv, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';

const LATEST = Math.max(...MIGRATIONS.map((m) => m.version));

let redis: TestRedis;
let standIn: StandIn;
let dir: string;
let daemon: DaemonProcess | undefined;

beforeAll(async () => {
  redis = await startTestRedis();
  standIn = await startStandIn({ port: 0, users: 50, seed: 3 });
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-locked-start-'));
});

afterAll(async () => {
  await daemon?.stop('SIGKILL').catch(() => undefined);
  await standIn?.close();
  await redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('a daemon starting beside a running sync', () => {
  it('waits for the write lock its migration needs, logs it, then starts', { timeout: 60_000 }, async () => {
    const path = join(dir, 'mirror.db');
    const older = new Database(path);
    older.pragma('journal_mode = WAL');
    migrate(older, MIGRATIONS.filter((m) => m.version < LATEST));
    older.close();

    // The other process's sync: the mirror's write lock, held across the daemon's first attempts.
    const sync = new Database(path);
    sync.exec('BEGIN IMMEDIATE');
    let held = true;
    try {
      daemon = spawnDaemon(
        daemonEnv({ redisUrl: redis.url, standIn, mirrorDb: path, queuePrefix: 'locked-start', statusPort: await freePort(), cron: '0 0 1 1 *' }),
      );
      const waiting = await daemon.waitForLog((l) => l.event === 'daemon.db_locked_at_start', 30_000, 'the wait for the lock');
      expect(waiting).toMatchObject({ file: 'mirror', attempt: 1 });
      expect(daemon.logs.some((l) => l.event === 'daemon.ready')).toBe(false);
      sync.exec('COMMIT');
      held = false;
      await daemon.ready;
    } finally {
      if (held) sync.exec('ROLLBACK');
      sync.close();
    }

    const check = new Database(path, { readonly: true });
    try {
      expect(check.pragma('user_version', { simple: true })).toBe(LATEST);
    } finally {
      check.close();
    }
    expect(await daemon.stop('SIGTERM')).toMatchObject({ code: 0 });
  });
});
