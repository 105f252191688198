/**
 * `user-mirror sinks replay <name> --from <cursor> | --since <time>`
 * against real servers the test starts (a private redis-server, a private
 * `nats-server -js`, an HTTP receiver): arguments and unknown names refused
 * naming the argument; a point older than the feed's retention refused; a
 * Redis Streams or JetStream destination that holds the events is not
 * written to, and the command's way for a consumer to re-read them works
 * (run as printed); one that lost them is left to the runner; the
 * WEBHOOK_URL queue gets the events again, in order, after what waited,
 * with its cursors unmoved and the replay shown by `sinks` while it runs.
 */
import { writeFileSync } from 'node:fs';
import { jetstream, jetstreamManager, AckPolicy, DeliverPolicy } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dispatchNewEvents } from '../src/daemon/change-delivery.js';
import { readDispatched, readSettled } from '../jobs/webhooks/delivery-state.js';
import { silentLogger } from '../src/runtime/log.js';
import { parseSinks } from '../src/sinks/sinks-file.js';
import { startSinks } from '../src/sinks/start.js';
import { runCli } from './support/cli-process.js';
import { eventually } from './support/eventually.js';
import { ensureBuilt } from './support/mirror-fixtures.js';
import { startTestNats, type TestNats } from './support/nats-server.js';
import { startTestRedis, type TestRedis } from './support/redis-server.js';
import { createFeedRig, type FeedRig } from './support/sink-rig.js';
import { createWebhookRig, SECRET, startReceiver, type Receiver, type WebhookRig } from './support/webhook-rig.js';

let redis: TestRedis;
let nats: TestNats;
let client: Redis;
let nc: NatsConnection;
let rig: FeedRig;

beforeAll(async () => {
  [redis, nats] = await Promise.all([startTestRedis(), startTestNats()]);
  client = new Redis(redis.url);
  nc = await connect({ servers: nats.url });
  rig = createFeedRig();
  ensureBuilt();
  rig.publish(60);
  writeFileSync(rig.dir.file('sinks.json'), JSON.stringify(sinksJson()));
}, 120_000);

afterAll(async () => {
  client.disconnect();
  await nc.close().catch(() => undefined);
  await Promise.all([redis.stop(), nats.stop()]);
  rig.close();
});

const sinksJson = () => ({
  sinks: [
    { name: 'bus', kind: 'redis_stream', redis: { url: redis.url }, stream: 'replayed' },
    { name: 'js', kind: 'jetstream', servers: [nats.url], stream: 'REPLAYED', subject_prefix: 'um.replayed' },
  ],
});

const env = (extra: Record<string, string> = {}) => ({ MIRROR_DB: rig.dbPath, SINKS_FILE: rig.dir.file('sinks.json'), ...extra });

/** Delivers the feed to both sinks of sinks.json, in process, until each destination holds the newest event. */
async function deliverAll(): Promise<void> {
  const running = startSinks(rig.feed, parseSinks(sinksJson(), {}), silentLogger);
  try {
    const latest = rig.feed.latest();
    await eventually(() => running.report(new Date()).every((s) => s.position === latest));
  } finally {
    await running.close();
  }
}

describe('sinks replay: arguments', () => {
  it.each([
    [['sinks', 'replay'], /argument|replay <name>/],
    [['sinks', 'replay', 'bus'], /--from: replay needs --from <cursor> or --since <time>/],
    [['sinks', 'replay', 'bus', '--from', '0'], /--from: must be a cursor/],
    [['sinks', 'replay', 'bus', '--from', 'abc'], /--from: must be a cursor/],
    [['sinks', 'replay', 'bus', '--since', 'yesterday'], /--since: must be an ISO 8601 time/],
    [
      ['sinks', 'replay', 'bus', '--from', '3', '--since', '2026-01-01T00:00:00Z'],
      /--from: replay needs --from <cursor> or --since <time>, one of them/,
    ],
    [['sinks', '--from', '3'], /--from: only with replay <name>/],
    [['sinks', 'replay', 'nope', '--from', '3'], /argument 2: no sink named "nope" \(the sinks: bus, js\)/],
  ])('%j is refused with exit 2, naming the argument', async (args, message) => {
    const r = await runCli(args, env());
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
  });

  it('refuses a point beyond the feed, and one older than its retention, with the oldest point it takes', async () => {
    const beyond = await runCli(['sinks', 'replay', 'bus', '--from', String(rig.feed.latest() + 1)], env());
    expect(beyond.code).toBe(1);
    expect(beyond.stderr).toMatch(/--from \d+: beyond the feed's newest event/);
    const future = await runCli(['sinks', 'replay', 'js', '--since', '2999-01-01T00:00:00Z'], env());
    expect(future.code).toBe(1);
    expect(future.stderr).toMatch(/--since 2999-01-01T00:00:00.000Z: no event was published since then/);
    // A feed of its own, retention having dropped its first 5 events.
    const old = createFeedRig();
    try {
      old.publish(12);
      old.feed.prune(new Date(Date.now() + 60_000).toISOString(), 5);
      writeFileSync(old.dir.file('sinks.json'), JSON.stringify(sinksJson()));
      const oldEnv = { MIRROR_DB: old.dbPath, SINKS_FILE: old.dir.file('sinks.json') };
      const first = old.feed.bounds().prunedThrough;
      expect(first).toBe(old.feed.bounds().latest - 7);
      const from = await runCli(['sinks', 'replay', 'bus', '--from', String(first)], oldEnv);
      expect(from.code).toBe(1);
      expect(from.stderr).toContain(
        `replay of sink bus refused: --from ${first}: older than the feed's retention: events through cursor ${first} were dropped; the oldest point it can re-send from is --from ${first + 1}`,
      );
      const since = await runCli(['sinks', 'replay', 'js', '--since', '2000-01-01T00:00:00Z'], oldEnv);
      expect(since.code).toBe(1);
      expect(since.stderr).toMatch(/--since 2000-01-01T00:00:00.000Z: older than the feed's retention/);
    } finally {
      old.close();
    }
  }, 60_000);
});

describe('sinks replay: destinations that hold the position by id', () => {
  it('Redis Streams: refuses to re-append what the stream holds and prints commands that re-read it; a deleted stream is the runner’s', async () => {
    await deliverAll();
    const latest = rig.feed.latest();
    const before = await client.xlen('replayed');
    const from = latest - 20;
    const r = await runCli(['sinks', 'replay', 'bus', '--from', String(from)], env());
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`refuses to take them again by design`);
    expect(await client.xlen('replayed')).toBe(before);
    expect(r.stderr).toContain('"event":"sink.replay"');
    // The printed commands, run as printed (quotes dropped), read from the point.
    const xrange = /redis-cli (XRANGE '([^']+)' (\S+) \+)/.exec(r.stderr);
    expect(xrange?.[2]).toBe('replayed');
    const read = (await client.call('XRANGE', 'replayed', xrange?.[3] ?? '', '+')) as Array<[string, string[]]>;
    expect(read.map(([id]) => id)).toEqual(Array.from({ length: latest - from + 1 }, (_, i) => `${from + i}-0`));
    const setid = /redis-cli XGROUP SETID '[^']+' <group> (\S+)/.exec(r.stderr);
    await client.xgroup('CREATE', 'replayed', 'billing', '$');
    await client.call('XGROUP', 'SETID', 'replayed', 'billing', setid?.[1] ?? '');
    const got = await client.xreadgroup('GROUP', 'billing', 'w1', 'COUNT', 1, 'STREAMS', 'replayed', '>');
    expect(got?.[0]?.[1][0]?.[0]).toBe(`${from}-0`);

    // Trimmed below the point: named, not re-appended.
    await client.xtrim('replayed', 'MINID', `${from + 5}-0`);
    const trimmed = await runCli(['sinks', 'replay', 'bus', '--from', String(from)], env());
    expect(trimmed.code).toBe(1);
    expect(trimmed.stderr).toMatch(new RegExp(`no longer the events from ${from} \\(its oldest: ${from + 5}`));

    // Deleted: the position is gone, the sink re-sends from the start by itself.
    await client.del('replayed');
    const behind = await runCli(['sinks', 'replay', 'bus', '--from', String(from)], env());
    expect(behind.code).toBe(0);
    expect(behind.stdout).toMatch(/holds up to cursor 0, before \d+: the sink re-sends from there by itself/);
    const asJson = await runCli(['sinks', 'replay', 'bus', '--from', String(from), '--json'], env());
    expect(asJson.code).toBe(0);
    expect(JSON.parse(asJson.stdout)).toEqual({ sink: 'bus', kind: 'redis_stream', from, outcome: 'behind', position: 0 });
  }, 120_000);

  it('JetStream: refuses, and the printed start sequence makes a consumer that begins at the point (--from and --since)', async () => {
    await deliverAll();
    const latest = rig.feed.latest();
    const jsm = await jetstreamManager(nc);
    const before = (await jsm.streams.info('REPLAYED')).state.messages;
    const firstAt = async (args: string[]): Promise<number> => {
      const r = await runCli(['sinks', 'replay', 'js', ...args], env());
      expect(r.code).toBe(1);
      expect(r.stderr).toContain('refuses to take them again by design');
      const seq = Number(/--deliver (\d+)/.exec(r.stderr)?.[1]);
      const name = `c${seq}`;
      await jsm.consumers.add('REPLAYED', {
        durable_name: name,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.StartSequence,
        opt_start_seq: seq,
      });
      const m = await (await jetstream(nc).consumers.get('REPLAYED', name)).next({ expires: 10_000 });
      return Number(m?.headers?.get('User-Mirror-Cursor'));
    };
    expect(await firstAt(['--from', String(latest - 7)])).toBe(latest - 7);
    const page = rig.feed.page(latest - 31, 1);
    if (page.gone || page.events[0] === undefined) throw new Error('unexpected');
    const since = page.events[0].publishedAt;
    // The first event published at or after that time (several may share a millisecond).
    const expected = (rig.feed.lastCursorBefore(since) ?? 0) + 1;
    expect(await firstAt(['--since', since])).toBe(expected);
    expect((await jsm.streams.info('REPLAYED')).state.messages).toBe(before);
  }, 120_000);
});

describe('sinks replay: the WEBHOOK_URL queue', () => {
  let receiver: Receiver;
  let hooks: WebhookRig;

  beforeAll(async () => {
    receiver = await startReceiver();
    hooks = await createWebhookRig(redis.url, receiver);
  });
  afterAll(async () => {
    await hooks.close();
    await receiver.close();
  });

  it('re-sends from the point, in order, after what waited (the order guard undisturbed), with the cursors unmoved; sinks shows it while it runs', async () => {
    const eventBody = (cursor: number, id: string) => rig.feed.body(cursor, id);
    const worker = await hooks.startWorker({ eventBody });
    await dispatchNewEvents(rig.feed, hooks.queue, silentLogger, 30);
    const latest = rig.feed.latest();
    const all = rig.feed.page(0, 1000);
    if (all.gone) throw new Error('unexpected');
    const ids = all.events.map((e) => e.id);
    await eventually(() => receiver.delivered().length === ids.length);
    expect(receiver.delivered()).toEqual(ids);
    await worker.close(5_000);

    const hookEnv = env({
      REDIS_URL: redis.url,
      QUEUE_PREFIX: hooks.prefix,
      MIRROR_ID: hooks.mirrorId,
      WEBHOOK_URL: receiver.url,
      WEBHOOK_SECRET: SECRET,
    });
    const unknown = await runCli(['sinks', 'replay', 'nope', '--from', '3'], hookEnv);
    expect(unknown.stderr).toMatch(/no sink named "nope" \(the sinks: bus, js, webhook\)/);
    // Events dispatched while the worker is away wait in front of the replay: the order guard must not take a
    // replayed (lower) cursor behind the last of them for an earlier event stalled there.
    rig.publish(3);
    await dispatchNewEvents(rig.feed, hooks.queue, silentLogger, 30);
    const fresh = rig.feed.page(latest, 10);
    if (fresh.gone) throw new Error('unexpected');
    const from = latest - 9;
    const r = await runCli(['sinks', 'replay', 'webhook', '--from', String(from)], hookEnv);
    expect(r.stderr).toContain('"event":"sink.replay"');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`replay 1 queued 10 events, cursors ${from} to ${latest}`);
    // Queued, the worker stopped: `sinks` names the replay in progress.
    const listed = await runCli(['sinks'], hookEnv);
    expect(listed.stdout).toMatch(
      new RegExp(`^sink webhook \\(webhook, .*\\): replay 1 in progress, 10 of 10 events from cursor ${from} to ${latest}`, 'm'),
    );
    await hooks.startWorker({ eventBody });
    const replayed = ids.slice(-10);
    const want = [...ids, ...fresh.events.map((e) => e.id), ...replayed];
    await eventually(() => receiver.delivered().length === want.length);
    expect(receiver.delivered()).toEqual(want);
    expect(receiver.requests.every((q) => q.verified)).toBe(true);
    // The replayed bodies are the events as stored, byte for byte.
    expect(receiver.requests.slice(-10).map((q) => q.body)).toEqual(all.events.slice(-10).map((e) => e.body));
    expect(await readDispatched(hooks.queue)).toBe(latest + 3);
    // The replay re-sent up to what was settled, not the 3 still queued (they went once).
    await eventually(async () => (await readSettled(hooks.queue)) === latest + 3);
    const done = await runCli(['sinks'], hookEnv);
    expect(done.stdout).not.toContain('replay 1 in progress');

    // A second replay of the same events is one of its own (new job ids), delivered again.
    const again = await runCli(['sinks', 'replay', 'webhook', '--from', String(latest + 2)], hookEnv);
    expect(again.stdout).toContain(`replay 2 queued 2 events, cursors ${latest + 2} to ${latest + 3}`);
    await eventually(() => receiver.delivered().length === want.length + 2);
    expect(receiver.delivered().slice(-2)).toEqual(fresh.events.slice(-2).map((e) => e.id));
  }, 180_000);
});
