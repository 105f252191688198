/**
 * A sync on a full disk (a 16 MB tmpfs the test mounts, filled with a file):
 * it fails loudly, naming the mirror's file, and leaves the mirror as it was;
 * with room again the next sync succeeds.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmdirSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { runCli } from './support/daemon-process.js';

let mount: string;
let standIn: StandIn;

beforeAll(async () => {
  mount = mkdtempSync(join(tmpdir(), 'user-mirror-full-sync-'));
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=16m,mode=0700', 'tmpfs', mount]);
  standIn = await startStandIn({ port: 0, users: 1_000, seed: 61 });
});
afterAll(async () => {
  await standIn?.close();
  execFileSync('umount', [mount]);
  rmdirSync(mount);
});

function fill(path: string): void {
  const fd = openSync(path, 'w');
  const chunk = Buffer.alloc(16 * 1024);
  try {
    for (;;) writeSync(fd, chunk);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
  } finally {
    closeSync(fd);
  }
}

describe('a sync on a full disk', () => {
  it('fails with exit 1 naming the mirror file, publishes nothing, and succeeds once there is room', async () => {
    const mirrorDb = join(mount, 'mirror.db');
    const env = {
      SERVICE_BASE_URL: standIn.baseUrl,
      SERVICE_API_KEY: standIn.apiKey,
      SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
      MIRROR_DB: mirrorDb,
    };
    expect((await runCli(['sync', '--once'], env, 60_000)).code).toBe(0);
    const count = () => {
      const db = new Database(mirrorDb, { readonly: true });
      try {
        return (db.prepare('SELECT count(*) AS n FROM users WHERE deleted_at IS NULL').get() as { n: number }).n;
      } finally {
        db.close();
      }
    };
    expect(count()).toBe(1_000);

    for (const u of standIn.directory.page(0, 1_000)) standIn.directory.update(String(u.user_id));
    standIn.directory.delete(standIn.directory.page(0, 10).map((u) => String(u.user_id)));
    const filler = join(mount, 'filler');
    fill(filler);
    const failed = await runCli(['sync', '--once'], env, 60_000);
    expect(failed.code).toBe(1);
    expect(failed.stderr).toContain(`${mirrorDb}: database or disk is full (SQLITE_FULL)`);
    expect(count()).toBe(1_000);

    rmSync(filler);
    const again = await runCli(['sync', '--once'], env, 60_000);
    expect(again.code, again.stderr).toBe(0);
    expect(count()).toBe(990);
  }, 120_000);
});
