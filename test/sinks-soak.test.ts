/**
 * The "Done when", on a real daemon (`user-mirror daemon`, its own
 * redis-server, nats-server -js, the stand-in over HTTP, a real HTTP
 * receiver) with three sinks, one of each kind: a webhook endpoint taking
 * creations, deletions and restorations, a Redis stream taking user events,
 * a JetStream stream taking all; each with a policy that hashes
 * client_user_id with a key file and drops the birth date. The directory
 * churns; the daemon is killed -9 at random moments (KILLS times); the
 * webhook receiver is down for several syncs, and `status` and /metrics name
 * its sink meanwhile. At the end each destination holds every event its
 * filter admits: exactly once (Redis, JetStream) or at least once (webhook,
 * each event first received in cursor order), no dropped field anywhere.
 */
import { createHmac } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChangeFeed } from '../db/change-feed.js';
import { openMirror } from '../db/open.js';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { eventually } from './support/eventually.js';
import { daemonEnv, runCli, scrapeMetric, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';
import { startTestNats, type TestNats } from './support/nats-server.js';
import { freePort, startTestRedis, type TestRedis } from './support/redis-server.js';
import { firstDeliveries, SECRET, startReceiver, type Receiver } from './support/webhook-rig.js';

const KEY = 's'.repeat(48);
/** kill -9s of the daemon; the test counts them and asserts it reached this. */
const KILLS = 22;
/** The round after which the receiver goes down, and how many syncs it stays down for. */
const DOWN_AT = 7;
const DOWN_SYNCS = 3;

let redis: TestRedis;
let nats: TestNats;
let standIn: StandIn;
let receiver: Receiver;
let dir: string;
let daemon: DaemonProcess | undefined;

beforeAll(async () => {
  redis = await startTestRedis();
  nats = await startTestNats();
  receiver = await startReceiver();
  standIn = await startStandIn({ port: 0, users: 100, seed: 52 });
  dir = mkdtempSync(join(tmpdir(), 'sinks-soak-'));
});

afterAll(async () => {
  await daemon?.stop('SIGKILL').catch(() => undefined);
  await receiver?.close();
  await standIn?.close();
  await nats?.stop();
  await redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('sinks soak: a webhook, a Redis Streams and a JetStream sink on one daemon', () => {
  it(`every admitted event reaches each destination through ${KILLS} kill -9s and a receiver down for ${DOWN_SYNCS} syncs`, async () => {
    writeFileSync(join(dir, 'join.key'), KEY, { mode: 0o600 });
    writeFileSync(join(dir, 'whsec'), `${SECRET}\n`, { mode: 0o600 });
    const policy = {
      name: 'pii-min',
      fields: { drop: ['fallback_birth_date'] },
      client_user_id: 'hmac',
      hmac_key_file: join(dir, 'join.key'),
    };
    const userTypes = ['user.created', 'user.updated', 'user.deleted', 'user.restored'];
    const hookTypes = ['user.created', 'user.deleted', 'user.restored'];
    writeFileSync(
      join(dir, 'sinks.json'),
      JSON.stringify({
        sinks: [
          {
            name: 'hook',
            kind: 'webhook',
            webhook: { url: receiver.url, secret: { file: join(dir, 'whsec') } },
            filter: { types: hookTypes },
            field_policy: policy,
          },
          {
            name: 'audit',
            kind: 'redis_stream',
            redis: { url: redis.url },
            stream: 'um:changes',
            filter: { types: userTypes },
            field_policy: policy,
          },
          { name: 'bus', kind: 'jetstream', servers: [nats.url], stream: 'UM', subject_prefix: 'um', field_policy: policy },
        ],
      }),
    );
    const mirrorDb = join(dir, 'mirror.db');
    const statusPort = await freePort();
    const env = daemonEnv({
      redisUrl: redis.url,
      standIn,
      mirrorDb,
      queuePrefix: 'soak',
      statusPort,
      cron: '*/2 * * * * *',
      extra: { SINKS_FILE: join(dir, 'sinks.json'), CHANGES_BASELINE: 'events' },
    });
    delete env.MANAGEMENT_URL;
    delete env.MANAGEMENT_KEY;

    const ids = () => standIn.directory.page(0, 1_000).map((u) => String(u.user_id));
    const deleted: string[] = [];
    const churn = (round: number) => {
      const live = ids();
      const gone = live.filter((_, i) => i % 29 === round % 29).slice(0, 3);
      standIn.directory.delete(gone);
      deleted.push(...gone);
      standIn.directory.add(2);
      for (const id of live.filter((_, i) => i % 17 === round % 17).slice(0, 4)) standIn.directory.update(id);
      if (round % 3 === 2) standIn.directory.restore(deleted.splice(0, 1));
    };

    let kills = 0;
    let sawDown = false;
    daemon = spawnDaemon(env);
    await daemon.ready;
    for (let round = 0; round < KILLS; round++) {
      churn(round);
      // A random moment: mid-sync, mid-delivery, or between two.
      await new Promise((r) => setTimeout(r, 300 + Math.random() * 2_700));
      await daemon.stop('SIGKILL');
      kills++;
      daemon = spawnDaemon(env);
      await daemon.ready;
      if (round === DOWN_AT) {
        // The receiver down for several syncs: the webhook sink holds, the others go on, status and /metrics name it.
        await receiver.down();
        const running = daemon;
        churn(100);
        const status = await eventually(
          async () => {
            const s = await runCli(['status', '--json'], env);
            const sinks = (JSON.parse(s.stdout) as { sinks: Array<{ name: string; problem: string | null }> }).sinks;
            return s.code === 1 && /^destination failing/.test(sinks.find((x) => x.name === 'hook')?.problem ?? '') && { s, sinks };
          },
          120_000,
          'status names the webhook sink while its receiver is down',
        );
        expect(status.sinks.find((x) => x.name === 'audit')?.problem).toBeNull();
        expect(status.sinks.find((x) => x.name === 'bus')?.problem).toBeNull();
        await eventually(
          async () => (await scrapeMetric(statusPort, 'user_mirror_sink_failing{sink="hook",kind="webhook"}')) === 1,
          60_000,
          'user_mirror_sink_failing for the webhook sink',
        );
        const before = running.logs.filter((l) => l.event === 'sync.finished').length;
        for (let n = 1; n <= DOWN_SYNCS; n++) {
          churn(200 + n);
          await eventually(
            () => running.logs.filter((l) => l.event === 'sync.finished').length >= before + n,
            120_000,
            `sync ${n} while the receiver is down`,
          );
        }
        sawDown = true;
        await daemon.stop('SIGKILL');
        kills++;
        await receiver.up();
        daemon = spawnDaemon(env);
        await daemon.ready;
      }
    }
    console.log(`sinks soak: ${kills} kill -9s of the daemon`);
    expect(kills).toBeGreaterThanOrEqual(KILLS);
    expect(sawDown).toBe(true);

    const db = openMirror(mirrorDb, { readonly: true });
    const client = new Redis(redis.url);
    const nc = await connect({ servers: nats.url });
    try {
      const feed = new ChangeFeed(db);
      const all = () => {
        const page = feed.page(0, 1_000_000);
        if (page.gone) throw new Error('feed gone');
        return page.events;
      };
      const forHook = () => all().filter((e) => hookTypes.includes(e.type) || e.type === 'mirror.restored');
      const jsm = await jetstreamManager(nc);
      await eventually(
        async () => {
          const events = all();
          const admitted = events.filter((e) => userTypes.includes(e.type)).length;
          return (
            (await client.xlen('um:changes')) === admitted &&
            (await jsm.streams.info('UM')).state.messages === events.length &&
            firstDeliveries(receiver).length === forHook().length
          );
        },
        180_000,
        () => `every destination caught up with the feed (webhook: ${firstDeliveries(receiver).length} of ${forHook().length})`,
      );
      await daemon.stop('SIGTERM');
      daemon = undefined;
      const events = all();
      expect(events.length).toBeGreaterThan(100);

      // Redis: exactly once, in cursor order.
      const entries = await client.xrange('um:changes', '-', '+');
      expect(entries.map(([id]) => id)).toEqual(events.filter((e) => userTypes.includes(e.type)).map((e) => `${e.cursor}-0`));
      // JetStream: exactly once, in cursor order.
      const consumer = await jetstream(nc).consumers.get('UM');
      const msgs: Array<{ id: string | undefined; body: string }> = [];
      while (msgs.length < events.length) {
        for await (const m of await consumer.fetch({ max_messages: events.length - msgs.length, expires: 5_000 }))
          msgs.push({ id: m.headers?.get('Nats-Msg-Id'), body: m.string() });
      }
      expect(msgs.map((m) => m.id)).toEqual(events.map((e) => e.id));
      // Webhook: at least once; each event first received in cursor order; nothing it does not admit; all signed.
      const hookIds = forHook().map((e) => e.id);
      expect(firstDeliveries(receiver)).toEqual(hookIds);
      const repeats = receiver.delivered().length - hookIds.length;
      console.log(`sinks soak: webhook ${hookIds.length} events, ${repeats} received again after a kill`);
      const hooked = receiver.requests.filter((r) => r.status !== 'destroyed' && r.status < 300);
      expect(hooked.every((r) => r.verified)).toBe(true);

      const bodies = [...entries.map(([, f]) => f[f.indexOf('event') + 1] ?? ''), ...msgs.map((m) => m.body), ...hooked.map((r) => r.body)];
      const withUser = standIn.directory.page(0, 1_000).find((u) => u.fallback_birth_date != null);
      expect(withUser, 'the stand-in serves birth dates').toBeDefined();
      for (const body of bodies) {
        expect(body).not.toContain('fallback_birth_date');
        const e = JSON.parse(body) as { data: { client_user_id?: string } };
        if (e.data.client_user_id !== undefined) expect(e.data.client_user_id).toMatch(/^[0-9a-f]{64}$/);
      }
      const someone = standIn.directory.page(0, 1)[0];
      const hashed = createHmac('sha256', KEY).update(String(someone?.client_user_id)).digest('hex');
      expect(hooked.some((r) => r.body.includes(hashed))).toBe(true);
      expect(bodies.some((b) => b.includes(hashed))).toBe(true);
    } finally {
      client.disconnect();
      await nc.close();
      db.close();
    }
  });
});
