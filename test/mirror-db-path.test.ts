/**
 * MIRROR_DB that cannot be a mirror: a directory, a file that is not SQLite,
 * a device, a path whose parent is a file. Every command names the variable
 * and the path and exits 2 (configuration); nothing is created beside a
 * device (SQLite would make /dev/null-journal).
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MirrorDbError, openMirror } from '../db/open.js';
import { freePort } from './support/redis-server.js';
import { runCli, spawnDaemon } from './support/daemon-process.js';
import { requireBuiltCli } from './support/cli-process.js';

let dir: string;
let notDb: string;
let aDir: string;
let underFile: string;
const DEVICE = '/dev/null';
const besideDevice = ['-journal', '-wal', '-shm'].map((s) => `${DEVICE}${s}`);
const existedBefore = new Set(besideDevice.filter((p) => existsSync(p)));

beforeAll(() => {
  requireBuiltCli();
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-dbpath-'));
  notDb = join(dir, 'notes.txt');
  writeFileSync(notDb, 'this is not a database, but it is long enough to have a header. '.repeat(4));
  aDir = join(dir, 'a-directory');
  mkdirSync(aDir);
  underFile = join(notDb, 'mirror.db');
});

afterAll(() => {
  // Only what this test might have wrongly created.
  for (const p of besideDevice) if (!existedBefore.has(p) && existsSync(p)) rmSync(p);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function problemOf(path: string, readonly = false): string {
  try {
    openMirror(path, { readonly }).close();
  } catch (err) {
    expect(err).toBeInstanceOf(MirrorDbError);
    expect((err as Error).message).toMatch(/^invalid configuration:/);
    return (err as MirrorDbError).problems.join('\n');
  }
  throw new Error(`expected ${path} to be refused`);
}

describe('openMirror', () => {
  it('names MIRROR_DB and the path, and says what is wrong', () => {
    expect(problemOf(aDir)).toBe(`MIRROR_DB=${aDir}: is a directory, not a database file`);
    expect(problemOf(aDir, true)).toBe(`MIRROR_DB=${aDir}: is a directory, not a database file`);
    expect(problemOf(notDb)).toBe(`MIRROR_DB=${notDb}: not a SQLite database`);
    expect(problemOf(notDb, true)).toBe(`MIRROR_DB=${notDb}: not a SQLite database`);
    expect(problemOf(underFile)).toMatch(new RegExp(`^MIRROR_DB=${underFile}: cannot be read: ENOTDIR$`));
    expect(problemOf(join(dir, 'missing', 'mirror.db'), true)).toMatch(/: no such file$/);
    expect(problemOf(DEVICE)).toMatch(/^MIRROR_DB=\/dev\/null: is not a regular file/);
    for (const p of besideDevice) if (!existedBefore.has(p)) expect(existsSync(p), p).toBe(false);
  });

  it('still creates a new mirror, parent directories included', () => {
    const fresh = join(dir, 'new', 'deeper', 'mirror.db');
    openMirror(fresh).close();
    expect(existsSync(fresh)).toBe(true);
  });

  it('maps the file for a reader that asks (random lookups), and for no other', () => {
    const path = join(dir, 'mapped', 'mirror.db');
    openMirror(path).close();
    const mapped = openMirror(path, { readonly: true, mapped: true });
    const plain = openMirror(path, { readonly: true });
    try {
      expect(mapped.pragma('mmap_size', { simple: true })).toBe(1024 ** 3);
      expect(plain.pragma('mmap_size', { simple: true })).toBe(0);
    } finally {
      mapped.close();
      plain.close();
    }
  });
});

describe('commands', () => {
  const env = (mirrorDb: string, extra: Record<string, string> = {}) => ({
    MIRROR_DB: mirrorDb,
    SERVICE_BASE_URL: 'http://127.0.0.1:9',
    SERVICE_API_KEY: 'sk_test_not_used',
    MANAGEMENT_URL: 'http://127.0.0.1:9',
    MANAGEMENT_KEY: 'mg_test_not_used',
    ...extra,
  });

  it('exit 2 with MIRROR_DB=<path>: <problem>', async () => {
    const sync = await runCli(['sync', '--once'], env(aDir));
    expect(sync.code, sync.stderr).toBe(2);
    expect(sync.stderr).toContain(`MIRROR_DB=${aDir}: is a directory`);

    const resolve = await runCli(['resolve', 'someone'], env(notDb));
    expect(resolve.code, resolve.stderr).toBe(2);
    expect(resolve.stderr).toContain(`MIRROR_DB=${notDb}: not a SQLite database`);

    const device = await runCli(['sync', '--once'], env(DEVICE));
    expect(device.code, device.stderr).toBe(2);
    expect(device.stderr).toContain('MIRROR_DB=/dev/null: is not a regular file');
    for (const p of besideDevice) if (!existedBefore.has(p)) expect(existsSync(p), p).toBe(false);
  });

  it('status prints the report and exits 2', async () => {
    const status = await runCli(['status'], env(notDb, { REDIS_URL: `redis://127.0.0.1:${await freePort()}` }));
    expect(status.code, status.stderr).toBe(2);
    expect(status.stdout).toContain(`unavailable: MIRROR_DB=${notDb}: not a SQLite database`);
    expect(status.stdout).toContain('redis unreachable');
  });

  it('the daemon exits 2 (pm2 does not restart on 2)', async () => {
    const d = spawnDaemon(env(aDir, { STATUS_PORT: '0' }));
    const exit = await d.exited;
    expect(exit.code).toBe(2);
    expect(d.text()).toContain(`MIRROR_DB=${aDir}: is a directory`);
  });
});
