/**
 * Scheduled exports against the daemon as a process: with EXPORT_DIR and a
 * per-second EXPORT_CRON it writes private export folders, the first full
 * and the next incremental, keeps EXPORT_KEEP of them, and `status` and
 * `/metrics` say when the last good one was written. When EXPORT_DIR is a
 * full file system (a tmpfs the test mounts and fills), the attempt fails,
 * nothing half written stays under an export's name, and `status` exits 1
 * naming the failure while `/metrics` says it too.
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

beforeAll(async () => {
  redis = await startTestRedis();
  standIn = await startStandIn({ port: 0, users: 600, seed: 29 });
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-export-schedule-'));
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

describe('scheduled exports', { timeout: 600_000 }, () => {
  it('writes private export folders, full then incremental, rotated, and status and /metrics say when', async () => {
    const port = await freePort();
    const lake = join(dir, 'lake');
    const env = daemonEnv({
      redisUrl: redis.url,
      standIn,
      mirrorDb: join(dir, 'mirror.db'),
      queuePrefix: 'exports',
      statusPort: port,
      cron: '*/3 * * * * *',
      extra: { EXPORT_DIR: lake, EXPORT_CRON: '*/2 * * * * *', EXPORT_KEEP: '2' },
    });
    const first = (daemon = spawnDaemon(env));
    await daemon.ready;
    await eventually(() => (daemon?.logs.filter((l) => l.event === 'export.done').length ?? 0) >= 3, 120_000, 'three exports');
    // Stopped before the folder is read: a tick after the third export starts a fourth, and on a busy machine its
    // .partial- folder would be seen half built. An attempt already running finishes in its child, so the test waits for those too.
    await daemon.stop();
    daemon = undefined;
    await eventually(
      () => scheduledChildrenRunning(`EXPORT_DIR=${lake}`, (arg) => arg === 'export').length === 0,
      120_000,
      'the export children to finish',
    );
    const done = first.logs.filter((l) => l.event === 'export.done').map((l) => l.kind);
    expect(done[0]).toBe('full');
    expect(done.slice(1)).toContain('incremental');
    const names = readdirSync(lake).sort();
    const folders = names.filter((n) => n.startsWith('export-'));
    expect(folders.length).toBe(2);
    expect(names.filter((n) => n.includes('.partial-'))).toEqual([]);
    for (const f of folders) {
      expect(statSync(join(lake, f)).mode & 0o777, f).toBe(0o700);
      for (const n of readdirSync(join(lake, f))) expect(statSync(join(lake, f, n)).mode & 0o777, n).toBe(0o600);
    }
    expect(statSync(join(lake, 'last-export.json')).mode & 0o777).toBe(0o600);
    const record = JSON.parse(readFileSync(join(lake, 'last-export.json'), 'utf8')) as { ok: boolean; at: string };
    expect(record.ok).toBe(true);

    // Fresh means within twice the schedule's interval: 4 s on the 2 s schedule above, less than a status run and a
    // scrape take on a busy machine. So the verdict is asked of a daemon and a status on a yearly schedule over the
    // same folder: the exports just written are fresh, and both name the time of the newest one, from its record.
    const yearly = { ...env, EXPORT_CRON: '0 0 0 1 1 *' };
    daemon = spawnDaemon(yearly);
    await daemon.ready;
    const status = await runCli(['status', '--json'], yearly);
    const report = JSON.parse(status.stdout) as { exports: { lastGoodAt: string; failed: string | null; stale: boolean } };
    expect(report.exports.lastGoodAt).toBe(record.at);
    expect(report.exports.failed).toBeNull();
    expect(report.exports.stale).toBe(false);
    expect(await metric(port, 'user_mirror_export_last_success_timestamp_seconds')).toBe(Date.parse(record.at) / 1000);
    expect(await metric(port, 'user_mirror_export_last_failed')).toBe(0);
    expect(await metric(port, 'user_mirror_export_stale')).toBe(0);
    await daemon.stop();
    daemon = undefined;
  }, 240_000);

  it.runIf(canMount)(
    'a full export disk fails loudly: status exits 1, /metrics says it, no partial export is left',
    async () => {
      const port = await freePort();
      const lake = join(dir, 'full');
      mkdirSync(lake, { recursive: true });
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m,mode=0700', 'tmpfs', lake], { stdio: 'ignore' });
      mounted = lake;
      // Leave a few KiB: enough for the record of the attempt, far too little for the files of 600 users.
      writeFileSync(join(lake, 'filler'), Buffer.alloc(1024 * 1024 - 16 * 1024));
      const env = daemonEnv({
        redisUrl: redis.url,
        standIn,
        mirrorDb: join(dir, 'mirror.db'),
        queuePrefix: 'exports-full',
        statusPort: port,
        cron: '*/3 * * * * *',
        extra: { EXPORT_DIR: lake, EXPORT_CRON: '*/2 * * * * *' },
      });
      daemon = spawnDaemon(env);
      await daemon.ready;
      const failed = await daemon.waitForLog((l) => l.event === 'export.failed', 120_000, 'a failed export');
      expect(JSON.stringify(failed)).toMatch(/ENOSPC|no space/i);
      expect(readdirSync(lake).filter((n) => n.startsWith('export-') || n.includes('.partial-'))).toEqual([]);
      await eventually(async () => (await metric(port, 'user_mirror_export_last_failed')) === 1, 30_000, 'the failure gauge');
      const status = await runCli(['status'], env);
      expect(status.code).toBe(1);
      expect(status.stdout).toMatch(/LAST EXPORT FAILED: .*(ENOSPC|no space)/i);
      await daemon.stop();
      daemon = undefined;
    },
    240_000,
  );
});
