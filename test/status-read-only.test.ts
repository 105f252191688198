/**
 * `status` on a mirror whose file system is mounted read-only (a small
 * tmpfs the test mounts, syncs onto, then remounts `ro`): it says
 * READ-ONLY, naming the file system, not "DISK LOW" (the bytes free of a
 * read-only mount mean nothing to a writer), reads the mirror all the
 * same, and exits 1. Remounted read-write, the line is gone.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { requireBuiltCli, runCli } from './support/cli-process.js';

const canMount = process.getuid?.() === 0;

let standIn: StandIn;
let mount: string;
let mounted = false;

beforeAll(async () => {
  requireBuiltCli('src/commands/status.js');
  standIn = await startStandIn({ port: 0, users: 300, seed: 89 });
  mount = mkdtempSync(join(tmpdir(), 'user-mirror-read-only-'));
  if (canMount) {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=16m,mode=0700', 'tmpfs', mount]);
    mounted = true;
  }
});

afterAll(async () => {
  await standIn?.close();
  if (mounted) execFileSync('umount', ['-l', mount]);
  if (mount !== undefined) rmdirSync(mount);
});

describe.runIf(canMount)('status on a read-only file system', () => {
  it('says READ-ONLY, not DISK LOW, still reads the mirror, and exits 1', async () => {
    const mirrorDb = join(mount, 'mirror.db');
    const env = {
      PATH: process.env.PATH,
      SERVICE_BASE_URL: standIn.baseUrl,
      SERVICE_API_KEY: standIn.apiKey,
      SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
      MIRROR_DB: mirrorDb,
      REDIS_URL: 'redis://127.0.0.1:1',
      LOG_LEVEL: 'warn',
    };
    const synced = await runCli(['sync', '--once'], env, 60_000);
    expect(synced.code, synced.stderr).toBe(0);
    // Room to spare for the test's 16 MB: below it, the disk is "low"; read-only must win over that.
    const warn = { ...env, MIRROR_DISK_WARN_BYTES: String(64 * 1024 * 1024) };
    const writable = await runCli(['status'], warn, 60_000);
    expect(writable.stdout).toMatch(/DISK LOW/);

    execFileSync('mount', ['-o', 'remount,ro', mount]);
    try {
      const ro = await runCli(['status'], warn, 60_000);
      expect(ro.code, ro.stdout).toBe(1);
      expect(ro.stdout).toContain(`READ-ONLY     the file system holding MIRROR_DB (${mirrorDb}) is mounted read-only`);
      expect(ro.stdout).not.toMatch(/DISK LOW|DISK FULL/);
      expect(ro.stdout).toMatch(/users +300 active/);
      const json = JSON.parse((await runCli(['status', '--json'], warn, 60_000)).stdout) as { mirror: { disk: { state: string } } };
      expect(json.mirror.disk.state).toBe('read-only');
    } finally {
      execFileSync('mount', ['-o', 'remount,rw', mount]);
    }
    const back = await runCli(['status'], { ...env, MIRROR_DISK_WARN_BYTES: '0' }, 60_000);
    expect(back.stdout).not.toContain('READ-ONLY');
    expect(back.code, back.stdout).toBe(0);
  }, 180_000);
});

describe.skipIf(canMount)('status on a read-only file system', () => {
  it('NOT RUN: mounting a tmpfs needs root', () => {
    expect(canMount).toBe(false);
  });
});
