/**
 * Scheduled backups against the daemon as a process: with BACKUP_DIR and a
 * per-second BACKUP_CRON it writes checked, private copies of the mirror
 * and the audit, keeps BACKUP_KEEP of each, and `status` and `/metrics` say
 * when the last good one was taken. When BACKUP_DIR is a full file system
 * (a tmpfs the test mounts and fills), the attempt fails, nothing half
 * written stays under a backup's name, and `status` exits 1 naming the
 * failure while `/metrics` says it too.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { startTestRedis, freePort, type TestRedis } from './support/redis-server.js';
import { daemonEnv, runCli, scheduledChildrenRunning, scrapeMetric, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';
import { eventually } from './support/eventually.js';

let redis: TestRedis;
let standIn: StandIn;
let dir: string;
let daemon: DaemonProcess | undefined;
let mounted: string | undefined;

/** A tmpfs we can fill: root only (the tests run as root here and in CI); otherwise the failure case says NOT RUN. */
function mountSmallTmpfs(at: string): boolean {
  mkdirSync(at, { recursive: true });
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m,mode=0700', 'tmpfs', at], { stdio: 'ignore' });
    mounted = at;
    return true;
  } catch {
    return false;
  }
}

beforeAll(async () => {
  redis = await startTestRedis();
  standIn = await startStandIn({ port: 0, users: 600, seed: 23 });
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-backup-schedule-'));
});

afterAll(async () => {
  await daemon?.stop('SIGKILL').catch(() => undefined);
  if (mounted !== undefined) execFileSync('umount', ['-l', mounted], { stdio: 'ignore' });
  await standIn?.close();
  await redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const metric = scrapeMetric;

const canMount = process.getuid?.() === 0;

describe('scheduled backups', { timeout: 600_000 }, () => {
  it('writes private, rotated copies of the mirror and the audit, and status and /metrics say when', async () => {
    const port = await freePort();
    // Two folders deep, neither there yet: the backup's own process makes both private.
    const backups = join(dir, 'backups', 'nightly');
    const env = daemonEnv({
      redisUrl: redis.url,
      standIn,
      mirrorDb: join(dir, 'mirror.db'),
      queuePrefix: 'backups',
      statusPort: port,
      cron: '*/3 * * * * *',
      extra: { BACKUP_DIR: backups, BACKUP_CRON: '*/2 * * * * *', BACKUP_KEEP: '2' },
    });
    daemon = spawnDaemon(env);
    await daemon.ready;
    await daemon.waitForLog((l) => l.event === 'backup.done', 60_000, 'a scheduled backup');
    // Rotation: after more attempts, two of each kind are left.
    await eventually(() => (daemon?.logs.filter((l) => l.event === 'backup.done').length ?? 0) >= 4, 60_000, 'four backups');
    // Stopped before the folder is read: a tick after the fourth backup starts a fifth, and on a busy machine its
    // .partial- file would be seen half written. An attempt already running finishes in its child, so the test waits for those too.
    await daemon.stop();
    daemon = undefined;
    await eventually(
      () => scheduledChildrenRunning(`BACKUP_DIR=${backups}`, (arg) => arg.endsWith('backup-main.js')).length === 0,
      120_000,
      'the backup children to finish',
    );
    const names = readdirSync(backups).sort();
    const mirrors = names.filter((n) => /^mirror-\d{8}T\d{9}Z\.db$/.test(n));
    const audits = names.filter((n) => /^audit-\d{8}T\d{9}Z\.db$/.test(n));
    expect(mirrors.length).toBe(2);
    expect(audits.length).toBe(2);
    expect(names.filter((n) => n.includes('.partial-'))).toEqual([]);
    for (const n of [...mirrors, ...audits, 'last-backup.json']) expect(statSync(join(backups, n)).mode & 0o777, n).toBe(0o600);
    expect(statSync(backups).mode & 0o777).toBe(0o700);
    expect(statSync(join(dir, 'backups')).mode & 0o777).toBe(0o700);
    const record = JSON.parse(readFileSync(join(backups, 'last-backup.json'), 'utf8')) as { ok: boolean; at: string };
    expect(record.ok).toBe(true);

    // Fresh means within twice the schedule's interval: 4 s on the 2 s schedule above, less than a status run and a
    // scrape take on a busy machine. So the verdict is asked of a daemon and a status on a yearly schedule over the
    // same folder: the backups just taken are fresh, and both name the time of the newest one, from its record.
    const yearly = { ...env, BACKUP_CRON: '0 0 0 1 1 *' };
    daemon = spawnDaemon(yearly);
    await daemon.ready;
    const status = await runCli(['status', '--json'], yearly);
    const report = JSON.parse(status.stdout) as { backups: { lastGoodAt: string; failed: string | null; stale: boolean } };
    expect(report.backups.lastGoodAt).toBe(record.at);
    expect(report.backups.failed).toBeNull();
    expect(report.backups.stale).toBe(false);
    expect(await metric(port, 'user_mirror_backup_last_success_timestamp_seconds')).toBe(Date.parse(record.at) / 1000);
    expect(await metric(port, 'user_mirror_backup_last_failed')).toBe(0);
    expect((await metric(port, 'user_mirror_backup_last_bytes')) ?? 0).toBeGreaterThan(100_000);
    expect(await metric(port, 'user_mirror_backup_stale')).toBe(0);
    await daemon.stop();
    daemon = undefined;
  }, 180_000);

  it.runIf(canMount)(
    'a full backup disk fails loudly: status exits 1, /metrics says it, no partial copy is left',
    async () => {
      const port = await freePort();
      const backups = join(dir, 'full');
      expect(mountSmallTmpfs(backups)).toBe(true);
      // Leave a few KiB: enough for the record of the attempt, far too little for a copy of the mirror.
      writeFileSync(join(backups, 'filler'), Buffer.alloc(1024 * 1024 - 16 * 1024));
      const env = daemonEnv({
        redisUrl: redis.url,
        standIn,
        mirrorDb: join(dir, 'mirror.db'),
        queuePrefix: 'backups-full',
        statusPort: port,
        cron: '*/3 * * * * *',
        extra: { BACKUP_DIR: backups, BACKUP_CRON: '*/2 * * * * *' },
      });
      daemon = spawnDaemon(env);
      await daemon.ready;
      const failed = await daemon.waitForLog((l) => l.event === 'backup.failed', 60_000, 'a failed backup');
      expect(JSON.stringify(failed)).toMatch(/full|SQLITE_FULL|ENOSPC/i);
      expect(readdirSync(backups).filter((n) => n.endsWith('.db') || n.includes('.partial-'))).toEqual([]);
      await eventually(async () => (await metric(port, 'user_mirror_backup_last_failed')) === 1, 30_000, 'the failure gauge');
      const status = await runCli(['status'], env);
      expect(status.code).toBe(1);
      expect(status.stdout).toMatch(/LAST BACKUP FAILED: .*(full|SQLITE_FULL|ENOSPC)/i);
      await daemon.stop();
      daemon = undefined;
    },
    180_000,
  );
});
