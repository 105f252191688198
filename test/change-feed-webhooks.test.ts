/**
 * The change feed pushed, end to end: the daemon (a child process, as pm2
 * runs it) syncs a churning stand-in every 2 s and POSTs every event to a
 * real receiver that verifies each signature. The receiver fails half its
 * requests, then is down for a while, and the daemon is killed with -9 mid-
 * delivery and started again: every event the mirror's feed holds arrives,
 * no other, each user's in order, repeats only with the same id and body.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChangeEventSchema } from '../db/change-event.js';
import { ChangeFeed } from '../db/change-feed.js';
import { openMirror } from '../db/open.js';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { daemonEnv, getStatus, runCli, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';
import { freePort, startTestRedis, type TestRedis } from './support/redis-server.js';
import { SECRET, startReceiver, type Receiver } from './support/webhook-rig.js';
import { eventually } from './support/eventually.js';

let redis: TestRedis;
let standIn: StandIn;
let receiver: Receiver;
let dir: string;
let daemon: DaemonProcess | undefined;

beforeAll(async () => {
  redis = await startTestRedis();
  standIn = await startStandIn({ port: 0, users: 400, seed: 23 });
  receiver = await startReceiver();
  dir = mkdtempSync(join(tmpdir(), 'feed-webhooks-'));
});

afterAll(async () => {
  await daemon?.stop('SIGKILL').catch(() => undefined);
  await receiver?.close();
  await standIn?.close();
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Every event the mirror's feed holds, in cursor order. */
function feedBodies(mirrorDb: string): Map<string, string> {
  const db = openMirror(mirrorDb, { readonly: true });
  try {
    const page = new ChangeFeed(db).page(0, 1_000_000);
    if (page.gone) throw new Error('feed trimmed');
    return new Map(page.events.map((e) => [e.id, e.body]));
  } finally {
    db.close();
  }
}

describe('webhooks from the daemon', () => {
  it('deliver every event of a churning directory through failures, an outage and a kill -9, in order per user', async () => {
    const mirrorDb = join(dir, 'mirror.db');
    const env = daemonEnv({
      redisUrl: redis.url,
      standIn,
      mirrorDb,
      queuePrefix: `t${Date.now()}`,
      statusPort: await freePort(),
      extra: { WEBHOOK_URL: receiver.url, WEBHOOK_SECRET: SECRET, WEBHOOK_TIMEOUT_MS: '2000', CHANGES_BASELINE: 'events' },
    });
    // Half the requests fail, in every way the worker retries.
    let flaky = true;
    receiver.answer = ({ n }) =>
      !flaky || n % 2 === 0
        ? { status: 204 }
        : ((['destroy', { status: 500 }, { status: 429, headers: { 'retry-after': '1' } }] as const)[n % 3] ?? { status: 503 });
    daemon = spawnDaemon(env);
    await daemon.ready;

    const ids = () => standIn.directory.page(0, 1_000).map((u) => String(u.user_id));
    const deleted: string[] = [];
    const churn = (round: number) => {
      const live = ids();
      const gone = live.filter((_, i) => i % 37 === round % 37).slice(0, 4);
      standIn.directory.delete(gone);
      deleted.push(...gone);
      standIn.directory.add(3);
      for (const id of live.filter((_, i) => i % 23 === round % 23).slice(0, 6)) standIn.directory.update(id);
      if (round % 3 === 2) standIn.directory.restore(deleted.splice(0, 2));
    };
    // Each round is published before the next: two syncs finish after it (the first may have started before it).
    // A fixed pause is not enough on a busy machine, where a delete and its restore could fall in one sync.
    const settle = async () => {
      const finished = () => daemon?.logs.filter((l) => l.event === 'sync.finished').length ?? 0;
      const before = finished();
      await eventually(() => finished() >= before + 2, 120_000, 'two syncs after a round of churn');
    };

    for (let round = 0; round < 4; round++) {
      churn(round);
      await settle();
    }
    // The receiver goes away for a while; changes keep coming.
    await receiver.down();
    for (let round = 4; round < 6; round++) {
      churn(round);
      await settle();
    }
    await receiver.up();
    // Killed mid-delivery: requests are in flight at the moment of the kill.
    receiver.latencyMs = 50;
    await eventually(() => receiver.requests.length > 0, 10_000, 'a delivery in flight');
    await daemon.stop('SIGKILL');
    const firstRun = daemon;
    churn(6);
    daemon = spawnDaemon(env);
    await daemon.ready;
    for (let round = 7; round < 9; round++) {
      churn(round);
      await settle();
    }
    flaky = false;
    receiver.latencyMs = 0;

    // Quiet: once a sync finds nothing new, everything the feed holds must arrive.
    const expected = await eventually(
      () => {
        const feed = feedBodies(mirrorDb);
        const got = new Set(receiver.delivered());
        return feed.size > 0 && [...feed.keys()].every((id) => got.has(id)) ? feed : undefined;
      },
      90_000,
      'every feed event delivered',
    );
    // Operators see it caught up: /metrics, /readyz and status agree (the settled cursor lands just after the last 2xx).
    const port = Number(env.STATUS_PORT);
    await eventually(
      async () => (await getStatus(port, '/metrics')).body.includes('user_mirror_webhook_events_behind 0'),
      10_000,
      'metrics caught up',
    );
    const metrics = (await getStatus(port, '/metrics')).body;
    expect(metrics).toMatch(/user_mirror_webhook_seconds_behind 0/);
    expect(metrics).toMatch(/user_mirror_webhook_deliveries_total\{outcome="delivered"\} [1-9]\d*$/m);
    expect(JSON.parse((await getStatus(port, '/readyz')).body)).toMatchObject({ checks: { webhooks: 'ok' } });
    const status = await runCli(['status', '--json'], env);
    expect(JSON.parse(status.stdout)).toMatchObject({
      webhooks: { eventsBehind: 0, secondsBehind: 0, failed: 0 },
      changeFeed: { latest: expected.size },
    });
    await daemon.stop('SIGTERM');
    // Neither the signing secret nor the receiver's query token ever reaches a log line.
    const output = [firstRun, daemon].map((d) => JSON.stringify(d.logs) + d.text()).join('\n');
    expect(output).toContain('webhooks.dispatched');
    expect(output).not.toContain(SECRET.slice('whsec_'.length, 'whsec_'.length + 16));
    expect(output).not.toContain('token=abc');
    daemon = undefined;

    const final = feedBodies(mirrorDb);
    expect(final.size).toBe(expected.size);
    const types = new Set([...final.values()].map((b) => (JSON.parse(b) as { type: string }).type));
    expect(types).toEqual(new Set(['user.created', 'user.updated', 'user.deleted', 'user.restored']));
    // Every request carried a valid signature; nothing arrived that the feed does not hold.
    expect(receiver.requests.every((r) => r.verified)).toBe(true);
    for (const r of receiver.requests) expect(final.get(r.id), `unknown event ${r.id}`).toBe(r.body);
    expect(new Set(receiver.delivered())).toEqual(new Set(final.keys()));
    // Each user's events, by first delivery, in cursor order.
    const firstSeen = [...new Set(receiver.delivered())].map((id) => ChangeEventSchema.parse(JSON.parse(final.get(id) ?? '')));
    const byUser = new Map<string, number[]>();
    for (const e of firstSeen) {
      if (!('user_id' in e.data)) continue;
      byUser.set(e.data.user_id, [...(byUser.get(e.data.user_id) ?? []), e.cursor]);
    }
    for (const [user, cursors] of byUser) expect(cursors, user).toEqual([...cursors].sort((a, b) => a - b));
    // The failures happened: retries and repeats were needed.
    expect(receiver.requests.length).toBeGreaterThan(final.size);
  });

  it('a receiver that redirects holds every event: status exits 1, /metrics and the logs name it, /readyz stays 200; once it answers, all arrive in order', async () => {
    const redirecting = await startReceiver();
    try {
      redirecting.answer = () => ({ status: 301, headers: { location: 'https://example.invalid/hooks' } });
      const statusPort = await freePort();
      const env = daemonEnv({
        redisUrl: redis.url,
        standIn,
        mirrorDb: join(dir, 'redirect.db'),
        queuePrefix: `r${Date.now()}`,
        mirrorId: 'redirected',
        statusPort,
        cron: '0 0 1 1 *',
        extra: { WEBHOOK_URL: redirecting.url, WEBHOOK_SECRET: SECRET, CHANGES_BASELINE: 'events' },
      });
      daemon = spawnDaemon(env);
      await daemon.ready;
      await eventually(() => redirecting.requests.length >= 2, 30_000, 'held attempts');

      // Someone else's endpoint does not take this mirror out of rotation: /readyz stays 200 and reports it.
      const ready = await eventually(
        async () => {
          const r = await getStatus(statusPort, '/readyz');
          return r.body.includes('failing since') ? r : undefined;
        },
        120_000,
        '/readyz reporting the failing endpoint',
      );
      expect(ready.status).toBe(200);
      expect(JSON.parse(ready.body)).toMatchObject({
        ready: true,
        checks: {
          mirror: 'ok',
          redis: 'ok',
          webhook_endpoint: expect.stringMatching(/^failing since .* \(status 301\); every event held$/),
        },
      });
      const metrics = await getStatus(statusPort, '/metrics');
      expect(metrics.body).toMatch(/^user_mirror_webhook_endpoint_failing [1-9]\d*$/m);
      expect(daemon.logs.some((l) => l.event === 'webhook.endpoint_failing')).toBe(true);
      const status = await runCli(['status'], env);
      expect(status.code).toBe(1);
      expect(status.stdout).toMatch(/ENDPOINT FAILING since \S+ \(status 301\): every event held, none lost/);
      // Held, not failed: every event is still waiting, and only the first was tried.
      expect(new Set(redirecting.requests.map((r) => r.id)).size).toBe(1);

      redirecting.answer = () => ({ status: 204 });
      const events = feedBodies(join(dir, 'redirect.db'));
      await eventually(() => new Set(redirecting.delivered()).size === events.size, 60_000, 'every held event delivered');
      expect([...new Set(redirecting.delivered())]).toEqual([...events.keys()]);
      await eventually(async () => (await runCli(['status'], env)).code === 0, 20_000, 'status 0 again');
      expect((await getStatus(statusPort, '/readyz')).status).toBe(200);
    } finally {
      await daemon?.stop('SIGTERM').catch(() => undefined);
      await redirecting.close();
    }
  });
});
