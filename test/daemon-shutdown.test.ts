/**
 * Shutdown in the middle of a sync. The mirror must come out whole: SQLite's
 * integrity check passes, no run is left 'running', and the users table is
 * either the previous complete snapshot or the new complete one, never a mix.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { startTestRedis, freePort, type TestRedis } from './support/redis-server.js';
import { daemonEnv, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';
import { SECOND_SIGNAL_EXIT_CODE } from '../src/daemon/shutdown.js';
import { eventually } from './support/eventually.js';

const USERS = 12_000;
const ADDED = 500;

let redis: TestRedis;
let standIn: StandIn;
let dir: string;
let daemon: DaemonProcess | undefined;

interface Run {
  id: number;
  status: string;
  error: string | null;
}

function mirror<T>(read: (db: Database.Database) => T): T {
  const db = new Database(join(dir, 'mirror.db'), { readonly: true, fileMustExist: true });
  try {
    return read(db);
  } finally {
    db.close();
  }
}
const runs = () => mirror((db) => db.prepare('SELECT id, status, error FROM sync_runs ORDER BY id').all() as Run[]);
const activeUsers = () => mirror((db) => (db.prepare('SELECT count(*) AS n FROM active_users').get() as { n: number }).n);

beforeAll(async () => {
  redis = await startTestRedis();
  standIn = await startStandIn({ port: 0, users: USERS, seed: 5 });
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-shutdown-'));
});

afterEach(async () => {
  await daemon?.stop('SIGKILL').catch(() => undefined);
  daemon = undefined;
});

afterAll(async () => {
  await standIn?.close();
  await redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function startDaemon(extra: Record<string, string> = {}): Promise<DaemonProcess> {
  const d = spawnDaemon(
    daemonEnv({
      redisUrl: redis.url,
      standIn,
      mirrorDb: join(dir, 'mirror.db'),
      queuePrefix: 'shutdown',
      statusPort: await freePort(),
      extra: { SYNC_CONCURRENCY: '2', SHUTDOWN_TIMEOUT_MS: '3000', ...extra },
    }),
  );
  daemon = d;
  await d.ready;
  return d;
}

/**
 * Waits until a sync that started from now on has fetched its first page
 * (the engine records the run then), and a little more. Returns the active
 * users at that point: the snapshot the interrupted run started from (a run
 * already under way may have published in the meantime).
 */
async function midSync(d: DaemonProcess): Promise<number> {
  const started = d.logs.filter((l) => l.event === 'sync.start').length;
  await eventually(() => d.logs.filter((l) => l.event === 'sync.start').length > started, 30_000, 'a sync to start');
  await eventually(() => runs().at(-1)?.status === 'running', 10_000, 'a running run');
  const snapshot = activeUsers();
  await new Promise((r) => setTimeout(r, 800));
  return snapshot;
}

function expectWholeMirror(allowed: readonly number[]): void {
  expect(mirror((db) => db.pragma('integrity_check', { simple: true }))).toBe('ok');
  expect(runs().filter((r) => r.status === 'running')).toEqual([]);
  expect(allowed).toContain(activeUsers());
}

describe('shutdown during a sync', () => {
  it('SIGTERM: aborts the sync at the deadline, keeps the mirror whole, exits 0', async () => {
    const d = await startDaemon();
    await eventually(() => runs().some((r) => r.status === 'succeeded'), 30_000, 'a first complete snapshot');
    expect(activeUsers()).toBe(USERS);

    // Make the next snapshot different and slow: 25 pages at 400 ms, two at a time, is
    // about 5 s, longer than the 3 s shutdown budget.
    standIn.directory.add(ADDED);
    standIn.faults.set({ latencyMs: 400 });
    let snapshot: number;
    try {
      snapshot = await midSync(d);
      const t0 = Date.now();
      const exit = await d.stop('SIGTERM', 20_000);
      expect(exit).toEqual({ code: 0, signal: null });
      // Within SHUTDOWN_TIMEOUT_MS and the close-down after it.
      expect(Date.now() - t0).toBeLessThan(9_000);
    } finally {
      standIn.faults.clear();
    }
    expect(d.logs.some((l) => l.event === 'sync.abort_for_shutdown')).toBe(true);
    expect(d.logs.some((l) => l.event === 'daemon.stopped')).toBe(true);
    // The aborted run published nothing: the previous snapshot, whole.
    expectWholeMirror([snapshot]);
    expect(runs().at(-1)).toMatchObject({ status: 'failed', error: 'aborted' });
  });

  it('a second signal exits at once with 130; the next daemon takes over the mirror', async () => {
    const d = await startDaemon({ SHUTDOWN_TIMEOUT_MS: '30000' });
    standIn.directory.add(ADDED);
    standIn.faults.set({ latencyMs: 300 });
    let snapshot: number;
    try {
      snapshot = await midSync(d);
      d.child.kill('SIGTERM');
      await d.waitForLog((l) => l.event === 'daemon.shutdown_started', 5_000, 'shutdown to start');
      const t0 = Date.now();
      const exit = await d.stop('SIGINT', 10_000);
      expect(exit).toEqual({ code: SECOND_SIGNAL_EXIT_CODE, signal: null });
      expect(Date.now() - t0).toBeLessThan(3_000);
    } finally {
      standIn.faults.clear();
    }
    // Killed mid-write: SQLite's journal keeps the file whole, the run stays 'running' until the next start.
    expect(mirror((db) => db.pragma('integrity_check', { simple: true }))).toBe('ok');
    expect([snapshot, USERS + 2 * ADDED]).toContain(activeUsers());

    // The dead daemon's lease and 'running' run must not block its successor.
    const next = await startDaemon();
    await eventually(() => activeUsers() === USERS + 2 * ADDED, 30_000, 'the successor to sync everything');
    expect(runs().find((r) => r.status === 'running' && r.id < (runs().at(-1)?.id ?? 0))).toBeUndefined();
    expect(runs().some((r) => r.status === 'failed' && r.error === 'interrupted')).toBe(true);
    expect(await next.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    expectWholeMirror([USERS + 2 * ADDED]);
  });
});
