/**
 * The issue's scenario, on a real daemon (pm2's way: `user-mirror daemon`,
 * its own redis-server, the stand-in over HTTP) with two sinks: a Redis
 * stream taking only user events, and a JetStream stream taking all, both
 * with a policy that hashes client_user_id and drops the birth date. The
 * directory churns; the daemon is killed -9 at random moments (20 times);
 * the NATS server is down for several syncs, and `status` names its sink
 * meanwhile. At the end each destination holds every event its filter
 * admits, exactly once, in cursor order, without the dropped field.
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
import { daemonEnv, runCli, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';
import { startTestNats, type TestNats } from './support/nats-server.js';
import { freePort, startTestRedis, type TestRedis } from './support/redis-server.js';

const KEY = 'h'.repeat(48);
const KILLS = 20;

let redis: TestRedis;
let nats: TestNats;
let standIn: StandIn;
let dir: string;
let daemon: DaemonProcess | undefined;

beforeAll(async () => {
  redis = await startTestRedis();
  nats = await startTestNats();
  standIn = await startStandIn({ port: 0, users: 120, seed: 51 });
  dir = mkdtempSync(join(tmpdir(), 'sinks-daemon-'));
});

afterAll(async () => {
  await daemon?.stop('SIGKILL').catch(() => undefined);
  await standIn?.close();
  await nats?.stop();
  await redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('a daemon with a Redis Streams and a JetStream sink', () => {
  it('delivers every admitted event exactly once, in order, without the dropped field, through 20 kill -9s and a NATS outage', async () => {
    writeFileSync(join(dir, 'join.key'), KEY, { mode: 0o600 });
    const policy = {
      name: 'pii-min',
      fields: { drop: ['fallback_birth_date'] },
      client_user_id: 'hmac',
      hmac_key_file: join(dir, 'join.key'),
    };
    const userTypes = ['user.created', 'user.updated', 'user.deleted', 'user.restored'];
    writeFileSync(
      join(dir, 'sinks.json'),
      JSON.stringify({
        sinks: [
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
    const env = daemonEnv({
      redisUrl: redis.url,
      standIn,
      mirrorDb,
      queuePrefix: 'sinks',
      statusPort: await freePort(),
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

    daemon = spawnDaemon(env);
    await daemon.ready;
    for (let round = 0; round < KILLS; round++) {
      churn(round);
      await new Promise((r) => setTimeout(r, 500 + Math.random() * 2_500));
      await daemon.stop('SIGKILL');
      if (round === 8) {
        // NATS down for several syncs: the JetStream sink holds, the Redis one goes on, status names the one down.
        await nats.kill();
        daemon = spawnDaemon(env);
        await daemon.ready;
        churn(100);
        await daemon.waitForLog((l) => l.event === 'sink.failing' && l.sink === 'bus', 60_000, 'sink.failing for bus');
        const status = await runCli(['status', '--json'], env);
        expect(status.code).toBe(1);
        const sinks = (JSON.parse(status.stdout) as { sinks: Array<{ name: string; problem: string | null }> }).sinks;
        expect(sinks.find((s) => s.name === 'bus')?.problem).toMatch(/^destination failing/);
        expect(sinks.find((s) => s.name === 'audit')?.problem).toBeNull();
        await daemon.stop('SIGKILL');
        await nats.restart();
      }
      daemon = spawnDaemon(env);
      await daemon.ready;
    }

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
      const jsm = await jetstreamManager(nc);
      await eventually(
        async () => {
          const events = all();
          const admitted = events.filter((e) => userTypes.includes(e.type)).length;
          return (await client.xlen('um:changes')) === admitted && (await jsm.streams.info('UM')).state.messages === events.length;
        },
        120_000,
        'both destinations caught up with the feed',
      );
      await daemon.stop('SIGTERM');
      daemon = undefined;
      const events = all();
      expect(events.length).toBeGreaterThan(120);

      const entries = await client.xrange('um:changes', '-', '+');
      expect(entries.map(([id]) => id)).toEqual(events.filter((e) => userTypes.includes(e.type)).map((e) => `${e.cursor}-0`));
      const consumer = await jetstream(nc).consumers.get('UM');
      const msgs: Array<{ id: string | undefined; body: string }> = [];
      while (msgs.length < events.length) {
        for await (const m of await consumer.fetch({ max_messages: events.length - msgs.length, expires: 5_000 }))
          msgs.push({ id: m.headers?.get('Nats-Msg-Id'), body: m.string() });
      }
      expect(msgs.map((m) => m.id)).toEqual(events.map((e) => e.id));

      const bodies = [...entries.map(([, f]) => f[f.indexOf('event') + 1] ?? ''), ...msgs.map((m) => m.body)];
      const withUser = standIn.directory.page(0, 1_000).find((u) => u.fallback_birth_date != null);
      expect(withUser, 'the stand-in serves birth dates').toBeDefined();
      for (const body of bodies) {
        expect(body).not.toContain('fallback_birth_date');
        const e = JSON.parse(body) as { data: { client_user_id?: string } };
        if (e.data.client_user_id !== undefined) expect(e.data.client_user_id).toMatch(/^[0-9a-f]{64}$/);
      }
      const someone = standIn.directory.page(0, 1)[0];
      const hashed = createHmac('sha256', KEY).update(String(someone?.client_user_id)).digest('hex');
      expect(bodies.some((b) => b.includes(hashed))).toBe(true);
    } finally {
      client.disconnect();
      await nc.close();
      db.close();
    }
  });
});
