/**
 * The read path on a full disk (a 16 MB tmpfs the test mounts and fills to
 * its last byte): offline `resolve`, `history`, `changes`, `status` and
 * `serve` answer from the last published state with no daemon running;
 * `status` and a failed sync name the full file system with its free bytes.
 * Before db/wal-pair.ts, `resolve` exited 1 with "disk I/O error": opening
 * the WAL-mode file had to create and grow its `-shm`.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, rmdirSync, rmSync, statfsSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VitalClient } from '@tryvital/vital-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { runCli } from './support/daemon-process.js';
import { requireBuiltCli, startCli } from './support/cli-process.js';
import { freePort } from './support/redis-server.js';
import { SDK_KEY_HEADER } from './support/replica-rig.js';

let mount: string;
let standIn: StandIn;
let mirrorDb: string;

beforeAll(async () => {
  requireBuiltCli('src/commands/serve.js');
  mount = mkdtempSync(join(tmpdir(), 'user-mirror-full-read-'));
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=16m,mode=0700', 'tmpfs', mount]);
  standIn = await startStandIn({ port: 0, users: 1_000, seed: 62 });
  mirrorDb = join(mount, 'mirror.db');
  const synced = await runCli(['sync', '--once'], { ...serviceEnv(), MIRROR_DB: mirrorDb }, 60_000);
  expect(synced.code, synced.stderr).toBe(0);
  for (const u of standIn.directory.page(0, 5)) standIn.directory.update(String(u.user_id));
  const again = await runCli(['sync', '--once'], { ...serviceEnv(), MIRROR_DB: mirrorDb }, 60_000);
  expect(again.code, again.stderr).toBe(0);
});
afterAll(async () => {
  await standIn?.close();
  execFileSync('umount', [mount]);
  rmdirSync(mount);
});

function serviceEnv(): Record<string, string> {
  return { SERVICE_BASE_URL: standIn.baseUrl, SERVICE_API_KEY: standIn.apiKey, SERVICE_API_KEY_HEADER: standIn.apiKeyHeader };
}

/** Writes until the file system refuses a byte more. */
function fill(path: string): void {
  const fd = openSync(path, 'w');
  try {
    for (const size of [64 * 1024, 4096, 1]) {
      const chunk = Buffer.alloc(size);
      try {
        for (;;) writeSync(fd, chunk);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
      }
    }
  } finally {
    closeSync(fd);
  }
}

const freeBytes = (): number => {
  const s = statfsSync(mount);
  return s.bavail * s.bsize;
};

describe('the read path on a full disk', () => {
  it('keeps -wal and -shm beside the mirror after sync --once (the last writer closed)', () => {
    expect(existsSync(`${mirrorDb}-wal`)).toBe(true);
    expect(existsSync(`${mirrorDb}-shm`)).toBe(true);
  });

  it('answers resolve, history, changes, status and serve with 0 bytes free; status and a failed sync name the full disk', async () => {
    const filler = join(mount, 'filler');
    fill(filler);
    try {
      expect(freeBytes()).toBe(0);
      const env = { MIRROR_DB: mirrorDb };
      const [first] = standIn.directory.page(0, 1);
      const id = String(first?.client_user_id);

      const resolved = await runCli(['resolve', id, '--json'], env);
      expect(resolved.code, resolved.stderr).toBe(0);
      expect(JSON.parse(resolved.stdout)).toMatchObject({ found: true, user: { user_id: first?.user_id } });
      const history = await runCli(['history', id, '--json'], env);
      expect(history.code, history.stderr).toBe(0);
      expect(history.stdout).toContain(String(first?.user_id));
      const changes = await runCli(['changes', '--limit', '3', '--json'], env);
      expect(changes.code, changes.stderr).toBe(0);
      expect(changes.stdout.trim().split('\n')).toHaveLength(3);

      const status = await runCli(['status', '--json'], env);
      expect(status.code).toBe(1);
      const report = JSON.parse(status.stdout) as { mirror: { available: boolean; activeUsers: number; disk: unknown } };
      expect(report.mirror).toMatchObject({ available: true, activeUsers: 1_000, disk: { freeBytes: 0, state: 'full' } });
      const text = await runCli(['status'], env);
      expect(text.stdout).toContain(`DISK FULL     the file system holding MIRROR_DB (${mirrorDb}) is full: 0 bytes free`);
      expect(text.stdout).not.toContain('held back by a reader');

      const port = await freePort();
      const serve = startCli(['serve'], {
        PATH: process.env.PATH ?? '',
        ...env,
        REPLICA_PORT: String(port),
        REPLICA_API_KEY_HEADER: SDK_KEY_HEADER,
      });
      try {
        const key = (await serve.line(/^REPLICA_API_KEY=/)).slice('REPLICA_API_KEY='.length);
        await serve.line(/"event":"replica.listening"/);
        const sdk = new VitalClient({ apiKey: key, baseUrl: `http://127.0.0.1:${port}`, maxRetries: 0 });
        expect((await sdk.user.getByClientUserId(id)).userId).toBe(first?.user_id);
      } finally {
        serve.child.kill('SIGTERM');
        expect(await serve.exited()).toBe(0);
      }

      const failed = await runCli(['sync', '--once'], { ...serviceEnv(), ...env }, 60_000);
      expect(failed.code).toBe(1);
      expect(failed.stderr).toMatch(new RegExp(`the file system holding MIRROR_DB \\(${mirrorDb}\\) is full: \\d+ bytes free`));
    } finally {
      rmSync(filler);
    }
  }, 120_000);

  it('still resolves when the -wal/-shm pair was deleted by hand: a brief read without a -shm, and the pair put back', async () => {
    rmSync(`${mirrorDb}-wal`, { force: true });
    rmSync(`${mirrorDb}-shm`, { force: true });
    const filler = join(mount, 'filler');
    fill(filler);
    try {
      const [first] = standIn.directory.page(0, 1);
      const resolved = await runCli(['resolve', String(first?.client_user_id), '--json'], { MIRROR_DB: mirrorDb });
      expect(resolved.code, resolved.stderr).toBe(0);
      expect(JSON.parse(resolved.stdout)).toMatchObject({ found: true, user: { user_id: first?.user_id } });
    } finally {
      rmSync(filler);
    }
  }, 60_000);
});
