/**
 * A failed backup after a good one, on a BACKUP_DIR that is full (a tmpfs
 * the test mounts and fills to ENOSPC): `backup` exits 1 naming the full
 * file system, and `status` says so at once (exit 1, LAST BACKUP FAILED),
 * not "last good 2s ago" until twice BACKUP_CRON's interval. The record of
 * the failure is written over the last one in place (a new file cannot be
 * made there). With room again, the next backup clears it.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { requireBuiltCli, runCli } from './support/cli-process.js';
import { fill } from './support/full-disk.js';

const canMount = process.getuid?.() === 0;

let standIn: StandIn;
let dir: string;
let backups: string;
let mounted = false;

beforeAll(async () => {
  requireBuiltCli('src/commands/backup.js', 'src/commands/status.js');
  standIn = await startStandIn({ port: 0, users: 800, seed: 71 });
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-backup-full-'));
  backups = join(dir, 'backups');
  mkdirSync(backups);
  if (canMount) {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=8m,mode=0700', 'tmpfs', backups]);
    mounted = true;
  }
});

afterAll(async () => {
  await standIn?.close();
  if (mounted) execFileSync('umount', ['-l', backups]);
  if (dir !== undefined) {
    if (mounted) rmdirSync(backups);
    rmSync(dir, { recursive: true, force: true });
  }
});

function env(): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH,
    SERVICE_BASE_URL: standIn.baseUrl,
    SERVICE_API_KEY: standIn.apiKey,
    SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
    MIRROR_DB: join(dir, 'data', 'mirror.db'),
    BACKUP_DIR: backups,
    // Hourly: "twice the interval" is two hours away, so only the record of the failure can make status exit 1.
    BACKUP_CRON: '7 * * * *',
    MIRROR_DISK_WARN_BYTES: '0',
    // Nothing listens: status reports Redis unreachable at once (a sync-only estate: not judged).
    REDIS_URL: 'redis://127.0.0.1:1',
    LOG_LEVEL: 'warn',
  };
}

describe.runIf(canMount)('a failed backup on a full BACKUP_DIR', { timeout: 300_000 }, () => {
  it('shows in status at once (exit 1, naming the full file system), and a good one clears it', async () => {
    expect((await runCli(['sync', '--once'], env(), 120_000)).code).toBe(0);
    const good = await runCli(['backup'], env(), 120_000);
    expect(good.code, good.stderr).toBe(0);
    const before = await runCli(['status'], env(), 60_000);
    expect(before.code, before.stdout).toBe(0);
    expect(before.stdout).toMatch(/backups +last good \d+s ago/);

    const filler = join(backups, 'filler');
    fill(filler);
    const failed = await runCli(['backup'], env(), 120_000);
    expect(failed.code).toBe(1);
    expect(failed.stderr).toMatch(/backup failed: the file system holding BACKUP_DIR \(\S+\) is full: \d+ bytes free/);
    // Nothing half written under a backup's name, and the record says the failure (written in place).
    expect(readdirSync(backups).filter((n) => n.includes('.partial-') || /^last-backup\.json\./.test(n))).toEqual([]);
    const record = JSON.parse(readFileSync(join(backups, 'last-backup.json'), 'utf8')) as { ok: boolean; lastGood?: { at: string } };
    expect(record.ok).toBe(false);
    expect(record.lastGood?.at).toBeDefined();

    const after = await runCli(['status'], env(), 60_000);
    expect(after.code, after.stdout).toBe(1);
    expect(after.stdout).toMatch(/LAST BACKUP FAILED: the file system holding BACKUP_DIR \(\S+\) is full/);
    // The last good copy is still named, with its age: the operator knows what there is to fall back on.
    expect(after.stdout).toMatch(/backups +last good \d+s ago/);
    const json = JSON.parse((await runCli(['status', '--json'], env(), 60_000)).stdout) as { backups: { failed: string | null } };
    expect(json.backups.failed).toMatch(/is full/);

    rmSync(filler);
    const again = await runCli(['backup'], env(), 120_000);
    expect(again.code, again.stderr).toBe(0);
    const up = await runCli(['status'], env(), 60_000);
    expect(up.code, up.stdout).toBe(0);
    expect(up.stdout).not.toContain('FAILED');
    expect(statSync(join(backups, 'last-backup.json')).mode & 0o777).toBe(0o600);
  });
});

describe.skipIf(canMount)('a failed backup on a full BACKUP_DIR', () => {
  it('NOT RUN: mounting a tmpfs needs root', () => {
    expect(canMount).toBe(false);
  });
});
