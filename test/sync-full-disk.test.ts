/**
 * A sync on a full disk (a 16 MB tmpfs the test mounts, filled with a file):
 * it fails loudly, naming the mirror's file, and leaves the mirror as it was;
 * `status` reports it though no run row could be written; with room again
 * the next sync succeeds. A disk with room for the run's WAL but not for
 * the checkpoint that copies it into the file: the failed checkpoint is
 * reported until the next sync retries it.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmdirSync, rmSync, statSync, truncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { runCli } from './support/daemon-process.js';
import { fill } from './support/full-disk.js';

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

describe('a sync on a full disk', () => {
  it('fails with exit 1 naming the mirror file, publishes nothing, and succeeds once there is room', async () => {
    const mirrorDb = join(mount, 'mirror.db');
    const env = syncEnv(mirrorDb);
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
    // The file system named, with the bytes free; SQLite's words kept after them.
    expect(failed.stderr).toMatch(
      /the file system holding MIRROR_DB \(\S+mirror\.db\) is full: \d+ bytes free \(database or disk is full, SQLITE_FULL\)/,
    );
    expect(count()).toBe(1_000);
    // `status` reads the failure even where the run row could not be written: from the record beside the mirror.
    const down = await runCli(['status'], { MIRROR_DB: mirrorDb, MIRROR_DISK_WARN_BYTES: '0' }, 30_000);
    expect(down.code).toBe(1);
    expect(down.stdout).toMatch(/LAST SYNC FAILED \(no run recorded\) at .*: the file system holding MIRROR_DB \(\S+mirror.db\) is full/);
    expect(down.stdout).toMatch(/DISK FULL +the file system holding MIRROR_DB \(\S+mirror.db\) is full: \d+ bytes free/);
    expect(down.stdout).toContain(mirrorDb);

    rmSync(filler);
    const again = await runCli(['sync', '--once'], env, 60_000);
    expect(again.code, again.stderr).toBe(0);
    expect(count()).toBe(990);
    const up = await runCli(['status'], { MIRROR_DB: mirrorDb, MIRROR_DISK_WARN_BYTES: '0' }, 30_000);
    expect(up.stdout).not.toContain('FAILED');
    expect(up.code, up.stdout).toBe(0);
  });

  it('reports a checkpoint that failed after a run, and the next sync retries it first', async () => {
    const mirrorDb = join(mount, 'mirror-2.db');
    const env = syncEnv(mirrorDb);
    // A first sync of 1,000 users writes ~2 MB of WAL, and its checkpoint grows the file by as much: leave room for one.
    const filler = join(mount, 'filler-2');
    fill(filler);
    truncateSync(filler, statSync(filler).size - 3 * 1024 * 1024);
    const run = await runCli(['sync', '--once'], env, 60_000);
    expect(run.code, run.stderr).toBe(0);
    // A brand-new mirror's WAL holds only its schema: nothing of an earlier checkpoint to retry, and no line saying so.
    expect(logLines(run.stdout).find((l) => l.event === 'sync.checkpoint_retried')).toBeUndefined();
    const failedCheckpoint = logLines(run.stdout).find((l) => l.event === 'sync.checkpoint_failed');
    expect(failedCheckpoint).toMatchObject({ level: 50, err: expect.objectContaining({ message: expect.stringMatching(/disk is full/) }) });
    expect(walBytes(mirrorDb)).toBeGreaterThan(1024 * 1024);

    const down = await runCli(['status'], { MIRROR_DB: mirrorDb, MIRROR_DISK_WARN_BYTES: '0' }, 30_000);
    expect(down.stdout).toMatch(/CHECKPOINT FAILED at .*disk is full/);
    expect(down.code).toBe(1);

    rmSync(filler);
    const again = await runCli(['sync', '--once'], env, 60_000);
    expect(again.code, again.stderr).toBe(0);
    expect(logLines(again.stdout).find((l) => l.event === 'sync.checkpoint_retried')).toMatchObject({ level: 30 });
    expect(walBytes(mirrorDb)).toBe(0);
    const up = await runCli(['status'], { MIRROR_DB: mirrorDb, MIRROR_DISK_WARN_BYTES: '0' }, 30_000);
    expect(up.stdout).not.toContain('FAILED');
    expect(up.code, up.stdout).toBe(0);

    // After a clean checkpoint nothing is left: the next sync retries nothing and says nothing of it
    // (its own lease row, written to the WAL before the run, is not an earlier checkpoint's leftover).
    const clean = await runCli(['sync', '--once'], env, 60_000);
    expect(clean.code, clean.stderr).toBe(0);
    expect(logLines(clean.stdout).map((l) => l.event)).toContain('sync.checkpoint');
    expect(logLines(clean.stdout).find((l) => l.event === 'sync.checkpoint_retried')).toBeUndefined();
  });
});

function syncEnv(mirrorDb: string): Record<string, string> {
  return {
    SERVICE_BASE_URL: standIn.baseUrl,
    SERVICE_API_KEY: standIn.apiKey,
    SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
    MIRROR_DB: mirrorDb,
  };
}

/** The WAL's size; 0 once the last connection's close removed it. */
function walBytes(db: string): number {
  try {
    return statSync(`${db}-wal`).size;
  } catch {
    return 0;
  }
}

function logLines(stdout: string): Array<Record<string, unknown>> {
  return stdout
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}
