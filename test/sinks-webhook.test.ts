/**
 * The webhook sink kind (SINKS_FILE `kind: "webhook"`): one BullMQ queue per
 * sink on a private redis-server, delivered to real HTTP receivers. Two sinks
 * with different filters and field policies each receive exactly what they
 * admit, the dropped field never; WEBHOOK_URL's queue and cursors are those
 * the code before sinks wrote, so a running installation carries over.
 */
import { createHmac } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisConnection, redisReady } from '../jobs/redis-connection.js';
import { webhookTarget } from '../jobs/webhooks/contract.js';
import { startChangeDelivery, type ChangeDelivery } from '../src/daemon/change-delivery.js';
import { silentLogger } from '../src/runtime/log.js';
import { parseSinks, type WebhookSink } from '../src/sinks/sinks-file.js';
import { runCli } from './support/cli-process.js';
import { eventually } from './support/eventually.js';
import { ensureBuilt, OTHER_TEAM, ROOT, TEAM } from './support/mirror-fixtures.js';
import { startTestRedis, type TestRedis } from './support/redis-server.js';
import { createFeedRig, type FeedRig } from './support/sink-rig.js';
import { SECRET, startReceiver } from './support/webhook-rig.js';

let redis: TestRedis;
let client: Redis;
let rig: FeedRig;
const KEY = 'k'.repeat(40);

beforeAll(async () => {
  redis = await startTestRedis();
  client = new Redis(redis.url);
  rig = createFeedRig();
  ensureBuilt();
  writeFileSync(rig.dir.file('hmac.key'), `${KEY}\n`, { mode: 0o600 });
  writeFileSync(rig.dir.file('whsec'), `${SECRET}\n`, { mode: 0o600 });
});

afterAll(async () => {
  client?.disconnect();
  await redis?.stop();
  rig?.close();
});

/** Delivery as the daemon starts it, on the private Redis. */
async function deliver(
  prefix: string,
  options: { webhookUrl?: string; sinks?: WebhookSink[] },
): Promise<{ d: ChangeDelivery; close: () => Promise<void> }> {
  const control = createRedisConnection(redis.url, { role: 'control' });
  await redisReady(control, 30_000);
  const d = startChangeDelivery({
    db: rig.db,
    config: { MIRROR_ID: 'sinks', CHANGES_RETENTION_DAYS: 30, WEBHOOK_TIMEOUT_MS: 5_000 },
    webhooks: options.webhookUrl === undefined ? undefined : { target: webhookTarget(options.webhookUrl), secret: SECRET },
    webhookSinks: options.sinks ?? [],
    redis: { control, endpoint: { mode: 'single', url: redis.url }, prefix, held: undefined },
    logger: silentLogger,
  });
  return {
    d,
    close: async () => {
      await d.close(5_000);
      control.disconnect();
    },
  };
}

/** The feed's events after `after`, with what a filter reads. */
function feedAfter(after: number): Array<{ cursor: number; id: string; type: string; body: string }> {
  const page = rig.feed.page(after, 100_000);
  if (page.gone) throw new Error('feed gone');
  return page.events;
}

describe('webhook sinks', () => {
  it('two webhook sinks with their own filters and policies each receive exactly what they admit, the dropped field never', async () => {
    const [created, changes] = await Promise.all([startReceiver(), startReceiver()]);
    const file = {
      sinks: [
        {
          name: 'created-hook',
          kind: 'webhook',
          webhook: { url: created.url, secret: { file: rig.dir.file('whsec') } },
          filter: { types: ['user.created'], teams: [TEAM] },
          field_policy: {
            name: 'no-birth',
            fields: { drop: ['fallback_birth_date'] },
            client_user_id: 'hmac',
            hmac_key_file: rig.dir.file('hmac.key'),
          },
        },
        {
          name: 'changes-hook',
          kind: 'webhook',
          webhook: { url: changes.url, secret: { file: rig.dir.file('whsec') } },
          filter: { types: ['user.updated', 'user.deleted', 'user.created'], teams: [OTHER_TEAM] },
          field_policy: { name: 'no-client-id', client_user_id: 'drop' },
        },
      ],
    };
    const sinks = parseSinks(file, {}) as WebhookSink[];
    const before = rig.feed.bounds().latest;
    rig.publish(40);
    const events = feedAfter(before);
    const running = await deliver('two', { sinks });
    try {
      // The rig publishes, in turn, created in TEAM, created in OTHER_TEAM, updated in TEAM, deleted in TEAM.
      const forCreated = events.filter((e) => e.type === 'user.created' && e.body.includes(`"team_id":"${TEAM}"`)).map((e) => e.id);
      const forChanges = events.filter((e) => e.body.includes(`"team_id":"${OTHER_TEAM}"`)).map((e) => e.id);
      expect(forCreated).toHaveLength(10);
      expect(forChanges).toHaveLength(10);
      await eventually(() => created.delivered().length >= forCreated.length && changes.delivered().length >= forChanges.length);
      // Let the dispatcher pass again: anything the filter did not admit would have been queued by now.
      await eventually(() => running.d.sinkReport(new Date()).every((r) => r.position === rig.feed.bounds().latest));
      expect(created.delivered()).toEqual(forCreated);
      expect(changes.delivered()).toEqual(forChanges);
      for (const r of created.requests) {
        expect(r.verified).toBe(true);
        expect(r.policy).toBe(sinks[0]?.policy.id);
        expect(r.body).not.toContain('birth');
        expect(r.body).not.toMatch(/client-\d/);
        // The join key replaced by its keyed HMAC: the published event's client_user_id, hashed.
        const e = JSON.parse(r.body) as { data: { client_user_id: string } };
        const published = JSON.parse(events.find((x) => x.id === r.id)?.body ?? '{}') as { data: { client_user_id: string } };
        expect(published.data.client_user_id).toMatch(/^client-\d+$/);
        expect(e.data.client_user_id).toBe(createHmac('sha256', KEY).update(published.data.client_user_id).digest('hex'));
      }
      for (const r of changes.requests) {
        expect(r.verified).toBe(true);
        expect(r.policy).toBe(sinks[1]?.policy.id);
        expect(r.body).toContain('birth');
        expect(r.body).not.toContain('client_user_id');
      }
      // Each sink is a row as the other kinds are (status, /metrics): caught up, not failing, its policy named.
      const rows = running.d.sinkReport(new Date());
      expect(rows.map((r) => [r.name, r.kind, r.policy, r.failing, r.eventsBehind])).toEqual([
        ['created-hook', 'webhook', sinks[0]?.policy.id, null, 0],
        ['changes-hook', 'webhook', sinks[1]?.policy.id, null, 0],
      ]);
      // Each has its own queue, named for the sink.
      const keys = await client.keys('two:webhooks-sinks-*:settled');
      expect(keys.sort()).toEqual(
        [
          `two:webhooks-sinks-changes-hook-${webhookTarget(changes.url).id}:settled`,
          `two:webhooks-sinks-created-hook-${webhookTarget(created.url).id}:settled`,
        ].sort(),
      );
      // The commands, without the daemon: `sinks` reads each webhook sink's position from its queue, and
      // `webhooks --sink` shows that queue.
      writeFileSync(rig.dir.file('sinks.json'), JSON.stringify(file));
      const env = {
        MIRROR_DB: rig.dbPath,
        REDIS_URL: redis.url,
        QUEUE_PREFIX: 'two',
        MIRROR_ID: 'sinks',
        SINKS_FILE: rig.dir.file('sinks.json'),
      };
      const listed = await runCli(['sinks', '--json'], env);
      expect(listed.stderr).toBe('');
      expect(listed.code).toBe(0);
      const latest = rig.feed.bounds().latest;
      expect((JSON.parse(listed.stdout) as { sinks: unknown[] }).sinks).toEqual([
        expect.objectContaining({ name: 'created-hook', kind: 'webhook', position: latest, eventsBehind: 0, problem: null }),
        expect.objectContaining({ name: 'changes-hook', kind: 'webhook', position: latest, eventsBehind: 0, problem: null }),
      ]);
      const queue = await runCli(['webhooks', '--sink', 'created-hook', '--json'], env);
      expect(queue.code).toBe(0);
      expect(JSON.parse(queue.stdout)).toMatchObject({
        queue: `webhooks-sinks-created-hook-${webhookTarget(created.url).id}`,
        jobs: { completed: forCreated.length, failed: 0 },
      });
      const none = await runCli(['webhooks', '--sink', 'nope'], env);
      expect(none.code).toBe(2);
      expect(none.stderr).toContain('--sink: SINKS_FILE names no sink "nope"');
    } finally {
      await running.close();
      await created.close();
      await changes.close();
    }
  });

  it('WEBHOOK_URL continues the cursor the code before sinks wrote: no event sent again, none skipped', async () => {
    const receiver = await startReceiver();
    const before = rig.feed.bounds().latest;
    rig.publish(12);
    // What the code before sinks left after delivering these 12: its queue's cursors, by their literal names.
    const queue = `webhooks-sinks-${webhookTarget(receiver.url).id}`;
    const upTo = rig.feed.bounds().latest;
    await client.set(`old:${queue}:dispatched`, String(upTo));
    await client.set(`old:${queue}:settled`, String(upTo));
    rig.publish(9);
    const expected = feedAfter(upTo).map((e) => e.id);
    expect(expected).toHaveLength(9);
    const running = await deliver('old', { webhookUrl: receiver.url });
    try {
      await eventually(() => receiver.delivered().length >= expected.length);
      await eventually(async () => Number(await client.get(`old:${queue}:settled`)) === rig.feed.bounds().latest);
      expect(receiver.delivered()).toEqual(expected);
      expect(receiver.requests.every((r) => r.verified && r.policy === undefined)).toBe(true);
      expect(feedAfter(before).length).toBe(21);
      // The shorthand is no webhook sink row: its own series (user_mirror_webhook_*) stay as they were.
      expect(running.d.sinkReport(new Date())).toEqual([]);
      expect(running.d.queue?.name).toBe(queue);
    } finally {
      await running.close();
      await receiver.close();
    }
  });

  it("retention holds every event a webhook sink's queue has not settled", async () => {
    const receiver = await startReceiver();
    await receiver.down();
    const [sink] = parseSinks(
      { sinks: [{ name: 'slow-hook', kind: 'webhook', webhook: { url: receiver.url, secret: { file: rig.dir.file('whsec') } } }] },
      {},
    ) as WebhookSink[];
    rig.publish(6);
    // Every event held is past retention (30 days).
    rig.db.prepare(`UPDATE change_events SET at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-40 days')`).run();
    const { oldest, latest } = rig.feed.bounds();
    if (oldest === null) throw new Error('the feed holds no events to hold');
    const running = await deliver('hold', { sinks: sink === undefined ? [] : [sink] });
    try {
      // The receiver is down: nothing is settled, so nothing may go.
      await eventually(() => running.d.sinkReport(new Date())[0]?.failing != null);
      await running.d.afterSync();
      expect(rig.feed.bounds().oldest).toBe(oldest);
      await receiver.up();
      await eventually(() => new Set(receiver.delivered()).size >= latest - oldest + 1);
      await eventually(() => running.d.sinkReport(new Date())[0]?.position === latest);
      await running.d.afterSync();
      // Settled: every event past retention goes.
      expect(rig.feed.bounds()).toMatchObject({ oldest: null, prunedThrough: latest });
    } finally {
      await running.close();
      await receiver.close();
    }
  });

  it("reaches an https receiver with the sink's CA from webhook.tls, and holds its events (endpoint failing) without it", async () => {
    // docs/replica.md's openssl recipe: a private CA and a certificate for 127.0.0.1.
    for (const line of readFileSync(join(ROOT, 'docs', 'replica.md'), 'utf8')
      .split('\n')
      .filter((l) => l.startsWith('openssl ')))
      execFileSync('sh', ['-c', line], { cwd: rig.dir.path, stdio: ['ignore', 'ignore', 'pipe'] });
    const got: Array<{ id: string; policy: string | undefined }> = [];
    const server = createServer(
      { key: readFileSync(rig.dir.file('replica.key')), cert: readFileSync(rig.dir.file('replica.pem')) },
      (req, res) => {
        req.resume();
        req.on('end', () => {
          got.push({ id: String(req.headers['webhook-id']), policy: req.headers['webhook-policy'] as string | undefined });
          res.writeHead(204).end();
        });
      },
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    const sinkOf = (name: string, tls: Record<string, string> | undefined) =>
      (
        parseSinks(
          {
            sinks: [
              {
                name,
                kind: 'webhook',
                webhook: {
                  url: `https://127.0.0.1:${port}/in`,
                  secret: { file: rig.dir.file('whsec') },
                  ...(tls === undefined ? {} : { tls }),
                },
                filter: { types: ['user.deleted'] },
              },
            ],
          },
          {},
        ) as WebhookSink[]
      )[0] as WebhookSink;
    const before = rig.feed.bounds().latest;
    rig.publish(8);
    const deleted = feedAfter(before)
      .filter((e) => e.type === 'user.deleted')
      .map((e) => e.id);
    expect(deleted).toHaveLength(2);
    const trustingSink = sinkOf('tls-hook', { ca_file: rig.dir.file('ca.pem') });
    const trusting = await deliver('tls', { sinks: [trustingSink] });
    const untrusting = await deliver('tls', { sinks: [sinkOf('no-ca-hook', undefined)] });
    try {
      await eventually(() => got.length >= deleted.length);
      expect(got.map((g) => g.id)).toEqual(deleted);
      expect(got.every((g) => g.policy === trustingSink.policy.id && g.policy.startsWith('pass:'))).toBe(true);
      // Without the CA the receiver's certificate is not trusted: an endpoint failure, every event held.
      const failing = await eventually(() => untrusting.d.sinkReport(new Date())[0]?.failing ?? undefined);
      expect(failing.last).toMatch(/CERT|certificate|UNABLE_TO/i);
      expect(got).toHaveLength(deleted.length);
    } finally {
      await trusting.close();
      await untrusting.close();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('refuses a webhook sink with a secret by value, credentials in its URL, or clear http beyond loopback', () => {
    const bad = () =>
      parseSinks(
        {
          sinks: [
            { name: 'a', kind: 'webhook', webhook: { url: 'https://hooks.example/in', secret: SECRET } },
            { name: 'b', kind: 'webhook', webhook: { url: 'https://u:p@hooks.example/in', secret: { file: rig.dir.file('whsec') } } },
            { name: 'c', kind: 'webhook', webhook: { url: 'http://hooks.example/in', secret: { file: rig.dir.file('whsec') } } },
          ],
        },
        {},
      );
    expect(bad).toThrow(/sinks\[0\] "a"\.webhook\.secret: must be \{ "file"/);
    expect(bad).toThrow(/sinks\[1\] "b"\.webhook\.url: must not carry credentials/);
    try {
      bad();
    } catch (err) {
      expect(String(err)).not.toContain(SECRET);
    }
    const clear = () =>
      parseSinks(
        { sinks: [{ name: 'c', kind: 'webhook', webhook: { url: 'http://hooks.example/in', secret: { file: rig.dir.file('whsec') } } }] },
        {},
      );
    expect(clear).toThrow(/sinks\[0\] "c"\.webhook\.url: hooks\.example is beyond this host/);
    expect(
      parseSinks(
        { sinks: [{ name: 'c', kind: 'webhook', webhook: { url: 'http://hooks.example/in', secret: { file: rig.dir.file('whsec') } } }] },
        {},
        'SINKS_FILE',
        { tlsByProxy: true },
      ),
    ).toHaveLength(1);
  });
});
