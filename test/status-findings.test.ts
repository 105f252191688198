/**
 * `status` tells what the logs tell, against real parts: a real daemon on a
 * real redis-server this test starts, the stand-in serving a listing with an
 * identity conflict (one user_id under a second client_user_id, listed first
 * from its users file) and a 5 MB record, a local receiver that never answers
 * within WEBHOOK_TIMEOUT_MS, and the removal audit on a 2 MB tmpfs the test
 * mounts and fills. Each case ends with `status` exiting 1 and naming it, a
 * figure on /metrics, and one log line from the daemon (not one per scrape).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, rmdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Directory } from '../src/stand-in/directory.js';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { daemonEnv, getStatus, runCli, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';
import { freePort, startTestRedis, type TestRedis } from './support/redis-server.js';
import { SECRET, startReceiver, type Receiver } from './support/webhook-rig.js';
import { eventually } from './support/eventually.js';
import { fill } from './support/full-disk.js';

const SEED = 41;
const USERS = 60;
const ALIAS = 'probe-alias';
const BIG_CLIENT = `big-${'x'.repeat(196)}`;

let redis: TestRedis;
let standIn: StandIn;
let receiver: Receiver;
let dir: string;
let mount: string;
let daemon: DaemonProcess | undefined;
let aliased: string;

beforeAll(async () => {
  redis = await startTestRedis();
  // The generated users as the stand-in will list them; the users file goes first.
  const generated = new Directory({ seed: SEED, users: USERS }).page(0, USERS);
  const victim = generated[10] ?? {};
  aliased = String(victim.user_id);
  const big = { ...(generated[20] ?? {}), user_id: 'f3b0c2d4-1111-4222-8333-944455556666', client_user_id: BIG_CLIENT };
  standIn = await startStandIn({
    port: 0,
    users: USERS,
    seed: SEED,
    records: [
      { ...victim, client_user_id: ALIAS },
      { ...big, padding: 'p'.repeat(5 * 1024 * 1024) },
    ],
  });
  receiver = await startReceiver();
  // The receiver holds every request far past WEBHOOK_TIMEOUT_MS: each attempt times out.
  receiver.latencyMs = 120_000;
  dir = mkdtempSync(join(tmpdir(), 'status-findings-'));
  mount = mkdtempSync(join(tmpdir(), 'status-findings-audit-'));
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m,mode=0700', 'tmpfs', mount]);
});

afterAll(async () => {
  await daemon?.stop('SIGKILL').catch(() => undefined);
  await receiver?.close();
  await standIn?.close();
  await redis?.stop();
  if (mount !== undefined) {
    execFileSync('umount', ['-l', mount]);
    rmdirSync(mount);
  }
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

function gauge(metrics: string, name: string): number | undefined {
  const line = metrics.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
}

describe('status tells what the logs tell', () => {
  it(
    'identity conflict, rejected 5 MB record, a receiver that times out, an audit on a full disk: status exits 1 naming each, /metrics has each, the daemon logs each once',
    { timeout: 180_000 },
    async () => {
      const statusPort = await freePort();
      const env = daemonEnv({
        redisUrl: redis.url,
        standIn,
        mirrorDb: join(dir, 'mirror.db'),
        queuePrefix: `t${Date.now()}`,
        statusPort,
        cron: '*/5 * * * * *',
        extra: {
          AUDIT_DB: join(mount, 'audit.db'),
          WEBHOOK_URL: receiver.url,
          WEBHOOK_SECRET: SECRET,
          WEBHOOK_TIMEOUT_MS: '1000',
          WEBHOOK_LAG_WARN_SECONDS: '4',
        },
      });
      daemon = spawnDaemon(env);
      await daemon.ready;
      const d = daemon;
      await d.waitForLog((l) => l.event === 'sync.finished', 60_000, 'a first sync');
      await d.waitForLog((l) => l.event === 'webhooks.lagging', 60_000, 'the lag logged');

      // The service lists the alias and resolves it; the mirror does not answer it.
      const online = await fetch(`${standIn.baseUrl}/v2/user/resolve/${ALIAS}`, { headers: { [standIn.apiKeyHeader]: standIn.apiKey } });
      expect(online.status).toBe(200);
      expect((await runCli(['resolve', ALIAS], env)).code).toBe(3);

      const status = await runCli(['status'], env);
      expect(status.code, status.stdout + status.stderr).toBe(1);
      expect(status.stdout).toMatch(
        new RegExp(`IDENTITY CONFLICTS 1 of run #\\d+'s 1: .*\\n    user_id ${aliased} listed as client_user_id ${ALIAS} and later`),
      );
      expect(status.stdout).toMatch(/REJECTED +1 record\(s\) listed by the service but not stored/);
      expect(status.stdout).toContain('client_user_id big-xxxx');
      expect(status.stdout).toContain('(200 characters)');
      expect(status.stdout).toMatch(/above SYNC_MAX_RECORD_BYTES/);
      expect(status.stdout).toMatch(/webhooks +LAGGING .* above WEBHOOK_LAG_WARN_SECONDS \(4s\)/);
      expect(status.stdout).toMatch(/webhooks +retrying evt_\w+ \(cursor \d+\), \d+ attempt\(s\), last: no answer within 1000 ms/);
      expect(status.stdout).not.toContain('p'.repeat(1000));

      const json = JSON.parse((await runCli(['status', '--json'], env)).stdout) as {
        mirror: {
          identityConflicts: { standing: number; conflicts: unknown[] };
          rejectedRecords: { count: number; records: Array<{ clientUserId: string; reason: string }> };
        };
        webhooks: { lagging: boolean; lagWarnSeconds: number; retrying: { attempts: number } | null };
        audit: { writable: boolean; judged: boolean };
      };
      expect(json.mirror.identityConflicts).toMatchObject({
        standing: 1,
        conflicts: [{ kind: 'user_id', userId: aliased, earlier: ALIAS }],
      });
      expect(json.mirror.rejectedRecords.count).toBe(1);
      expect(json.mirror.rejectedRecords.records[0]?.clientUserId).toMatch(/^big-x{76}… \(200 characters\)$/);
      expect(json.webhooks).toMatchObject({ lagging: true, lagWarnSeconds: 4 });
      expect(json.webhooks.retrying?.attempts).toBeGreaterThan(0);
      expect(json.audit).toMatchObject({ writable: true, judged: true });

      // /metrics, scraped again and again: the figures, and no second log line.
      let metrics = '';
      for (let i = 0; i < 5; i++) metrics = (await getStatus(statusPort, '/metrics')).body;
      expect(gauge(metrics, 'user_mirror_identity_conflicts')).toBe(1);
      expect(gauge(metrics, 'user_mirror_rejected_records')).toBe(1);
      expect(gauge(metrics, 'user_mirror_webhook_lagging')).toBe(1);
      expect(gauge(metrics, 'user_mirror_audit_writable')).toBe(1);

      // The audit's disk fills.
      fill(join(mount, 'filler'));
      await eventually(
        async () => gauge((await getStatus(statusPort, '/metrics')).body, 'user_mirror_audit_writable') === 0,
        30_000,
        'audit_writable 0',
      );
      await d.waitForLog((l) => l.event === 'audit.unwritable', 30_000, 'the audit logged');
      const full = await runCli(['status'], env);
      expect(full.code).toBe(1);
      expect(full.stdout).toMatch(new RegExp(`AUDIT NOT WRITABLE ${mount}: the disk is full`));
      const removals = await runCli(['removals'], env);
      expect(removals.code).toBe(1);
      expect(removals.stderr).toMatch(/AUDIT NOT WRITABLE .*the disk is full/);
      expect((await runCli(['removals', '--json'], env)).stdout).toMatch(/"writable": false/);

      rmSync(join(mount, 'filler'));
      await d.waitForLog((l) => l.event === 'audit.unwritable_cleared', 30_000, 'the audit writable again');
      expect(gauge((await getStatus(statusPort, '/metrics')).body, 'user_mirror_audit_writable')).toBe(1);

      // Each condition logged once, however many scrapes and looks; the sync logs its findings once per run, at warn.
      expect(d.logs.filter((l) => l.event === 'webhooks.lagging')).toHaveLength(1);
      expect(d.logs.filter((l) => l.event === 'audit.unwritable')).toHaveLength(1);
      const rejectedLines = d.logs.filter((l) => l.event === 'sync.rejected_record');
      const runs = new Set(d.logs.filter((l) => l.event === 'sync.finished').map((l) => l.runId));
      expect(rejectedLines.length).toBeGreaterThan(0);
      expect(rejectedLines.length).toBeLessThanOrEqual(runs.size + 1);
      expect(rejectedLines[0]).toMatchObject({ level: 40, clientUserId: expect.stringMatching(/\(200 characters\)$/) });
    },
  );
});
