/**
 * The JetStream sink against a private `nats-server -js` (a free port, its
 * own store): the stream created, subjects by team and type, Nats-Msg-Id =
 * event id; a publish that does not follow the last event refused by the
 * server; the delivering process killed -9 at random moments, every event
 * exactly once in order; the server down, events held, then delivered.
 */
import { jetstreamManager, jetstream, type JsMsg } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../src/runtime/log.js';
import { parseSinks } from '../src/sinks/sinks-file.js';
import { startSinks } from '../src/sinks/start.js';
import { eventually } from './support/eventually.js';
import { TEAM } from './support/mirror-fixtures.js';
import { startTestNats, type TestNats } from './support/nats-server.js';
import { createFeedRig, killHard, publishWhileKilling, type FeedRig } from './support/sink-rig.js';

let nats: TestNats;
let rig: FeedRig;
let nc: NatsConnection;

beforeAll(async () => {
  nats = await startTestNats();
  rig = createFeedRig();
  writeFileSync(rig.dir.file('hmac.key'), 'k'.repeat(40), { mode: 0o600 });
  nc = await connect({ servers: nats.url });
});

afterAll(async () => {
  await nc.close().catch(() => undefined);
  await nats.stop();
  rig.close();
});

const sinkFile = (stream: string, extra: Record<string, unknown> = {}) => ({
  sinks: [{ name: 'js', kind: 'jetstream', servers: [nats.url], stream, subject_prefix: `um.${stream.toLowerCase()}`, ...extra }],
});

async function messages(stream: string): Promise<JsMsg[]> {
  const n = await count(stream);
  // An ordered consumer reads the stream from its start, in sequence order.
  const consumer = await jetstream(nc).consumers.get(stream);
  const out: JsMsg[] = [];
  while (out.length < n) {
    const batch = await consumer.fetch({ max_messages: Math.min(1000, n - out.length), expires: 5_000 });
    for await (const m of batch) out.push(m);
  }
  return out;
}

async function count(stream: string): Promise<number> {
  const jsm = await jetstreamManager(nc);
  return (await jsm.streams.info(stream)).state.messages;
}

describe('JetStream sink', () => {
  it('creates the stream and publishes admitted events in order: subject by team and type, msg id = event id, policy applied', async () => {
    const cursors = rig.publish(16);
    const sinks = parseSinks(
      sinkFile('FILTERED', {
        filter: { teams: [TEAM] },
        field_policy: { fields: { drop: ['fallback_birth_date'] }, client_user_id: 'hmac', hmac_key_file: rig.dir.file('hmac.key') },
      }),
      {},
    );
    const page = rig.feed.page(0, 100_000);
    if (page.gone) throw new Error('feed gone');
    const kept = page.events.filter((e) => cursors.includes(e.cursor) && e.body.includes(TEAM));
    const running = startSinks(rig.feed, sinks, silentLogger);
    try {
      await eventually(async () => (await count('FILTERED').catch(() => 0)) >= kept.length);
      const got = await messages('FILTERED');
      expect(got.map((m) => m.headers?.get('Nats-Msg-Id'))).toEqual(kept.map((e) => e.id));
      expect(got.map((m) => m.subject)).toEqual(kept.map((e) => `um.filtered.${TEAM}.${e.type}`));
      for (const m of got) {
        expect(m.string()).not.toContain('birth');
        expect(m.string()).not.toMatch(/client-\d/);
        expect(m.headers?.get('User-Mirror-Field-Policy')).toBe(sinks[0]?.policy.id);
      }
      // A publish that does not follow the stream's last event is refused, whatever its id.
      const js = jetstream(nc);
      await expect(
        js.publish(`um.filtered.${TEAM}.user.created`, '{}', { msgID: 'evt_0_999999', expect: { lastMsgID: kept[0]?.id ?? '' } }),
      ).rejects.toThrow(/wrong last msg ID/i);
    } finally {
      await running.close();
    }
  });

  it('killed -9 at random moments (20 times) while events are published: every event exactly once, in order', async () => {
    const stream = 'KILLED';
    const file = sinkFile(stream);
    const child = await publishWhileKilling(rig, file, 20);
    const latest = rig.feed.bounds().latest;
    try {
      await eventually(async () => (await count(stream).catch(() => 0)) >= latest, 60_000, `stream ${stream} to hold ${latest} events`);
      const all = rig.feed.page(0, 100_000);
      if (all.gone) throw new Error('feed gone');
      const got = await messages(stream);
      expect(got.map((m) => m.headers?.get('Nats-Msg-Id'))).toEqual(all.events.map((e) => e.id));
      expect(got.map((m) => m.string())).toEqual(all.events.map((e) => e.body));
    } finally {
      await killHard(child);
    }
  });

  it('holds events while the server is down, names the sink as failing, and delivers them in order when it is back', async () => {
    const stream = 'OUTAGE';
    const running = startSinks(rig.feed, parseSinks(sinkFile(stream), {}), silentLogger);
    try {
      const latest = rig.feed.bounds().latest;
      await eventually(async () => (await count(stream).catch(() => 0)) === latest);
      await nc.close();
      await nats.kill();
      rig.publish(25);
      const failing = await eventually(() => {
        const r = running.report(new Date())[0];
        return r?.failing !== null && r;
      });
      expect(failing).toMatchObject({ name: 'js', kind: 'jetstream' });
      await nats.restart();
      nc = await connect({ servers: nats.url });
      const now = rig.feed.bounds().latest;
      await eventually(async () => (await count(stream).catch(() => 0)) === now);
      const all = rig.feed.page(0, 100_000);
      if (all.gone) throw new Error('feed gone');
      expect((await messages(stream)).map((m) => m.headers?.get('Nats-Msg-Id'))).toEqual(all.events.map((e) => e.id));
    } finally {
      await running.close();
    }
  });
});
