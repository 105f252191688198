/**
 * The Redis Streams sink against a private redis-server: in order, filter
 * and field policy applied, a repeat refused by Redis itself; the
 * delivering process killed -9 at random moments, no event twice and none
 * missing; the destination down, every event held and then delivered.
 */
import { writeFileSync } from 'node:fs';
import { createHmac } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyDatabase } from '../db/backup.js';
import { ChangeFeed } from '../db/change-feed.js';
import { lastCursor } from '../db/lineage.js';
import { openMirror } from '../db/open.js';
import { markRestore } from '../db/restore.js';
import { parseSinks } from '../src/sinks/sinks-file.js';
import { startSinks } from '../src/sinks/start.js';
import { silentLogger } from '../src/runtime/log.js';
import { eventually } from './support/eventually.js';
import { runCli } from './support/cli-process.js';
import { ensureBuilt } from './support/mirror-fixtures.js';
import { TEAM } from './support/mirror-fixtures.js';
import { startTestRedis, type TestRedis } from './support/redis-server.js';
import { createFeedRig, killHard, publishWhileKilling, type FeedRig } from './support/sink-rig.js';

let redis: TestRedis;
let client: Redis;
let rig: FeedRig;
const KEY = 'x'.repeat(48);

beforeAll(async () => {
  redis = await startTestRedis();
  client = new Redis(redis.url);
  // The outage case kills this server: the client reconnects, and says nothing meanwhile.
  client.on('error', () => undefined);
  rig = createFeedRig();
  ensureBuilt();
  writeFileSync(rig.dir.file('hmac.key'), `${KEY}\n`, { mode: 0o600 });
});

afterAll(async () => {
  client.disconnect();
  await redis.stop();
  rig.close();
});

const sinkFile = (stream: string, extra: Record<string, unknown> = {}) => ({
  sinks: [{ name: 'bus', kind: 'redis_stream', redis: { url: redis.url }, stream, ...extra }],
});

async function entries(stream: string): Promise<Array<{ id: string; fields: Record<string, string> }>> {
  const raw = await client.xrange(stream, '-', '+');
  return raw.map(([id, f]) => ({ id, fields: Object.fromEntries(f.flatMap((_, i) => (i % 2 === 0 ? [[f[i], f[i + 1]]] : []))) }));
}

describe('Redis Streams sink', () => {
  it('appends admitted events in cursor order as <cursor>-0, the policy applied, and Redis refuses a repeat', async () => {
    const cursors = rig.publish(24);
    const sinks = parseSinks(
      sinkFile('filtered', {
        filter: { types: ['user.created', 'user.updated'], teams: [TEAM] },
        field_policy: {
          name: 'no-birth',
          fields: { drop: ['fallback_birth_date'] },
          client_user_id: 'hmac',
          hmac_key_file: rig.dir.file('hmac.key'),
        },
      }),
      {},
    );
    const running = startSinks(rig.feed, sinks, silentLogger);
    try {
      // The rig publishes, in turn, created in TEAM, created in the other team, updated in TEAM, deleted in TEAM.
      const page = rig.feed.page(0, 100_000);
      if (page.gone) throw new Error('feed gone');
      const kept = page.events
        .filter((e) => cursors.includes(e.cursor) && (e.type === 'user.created' || e.type === 'user.updated') && e.body.includes(TEAM))
        .map((e) => e.cursor);
      expect(kept.length).toBe(12);
      const got = await eventually(async () => {
        const e = await entries('filtered');
        return e.length >= kept.length && e;
      });
      expect(got.map((e) => e.id)).toEqual(kept.map((c) => `${c}-0`));
      for (const e of got) {
        expect(e.fields.event).not.toContain('birth');
        expect(e.fields.event).not.toMatch(/client-\d/);
        expect(e.fields.policy).toBe(sinks[0]?.policy.id);
        expect(e.fields.team_id).toBe(TEAM);
        const event = JSON.parse(e.fields.event ?? '{}') as { id: string; cursor: number; data: { client_user_id: string } };
        expect(e.fields.event_id).toBe(event.id);
        expect(`${event.cursor}-0`).toBe(e.id);
        const n = /evt_[0-9a-f]+_(\d+)/.exec(event.id)?.[1];
        expect(n).toBe(String(event.cursor));
      }
      const first = JSON.parse(got[0]?.fields.event ?? '{}') as { data: { client_user_id: string; user_id: string } };
      const clientNo = Number(/(\d+)$/.exec(first.data.user_id)?.[1] ?? NaN);
      expect(first.data.client_user_id).toBe(createHmac('sha256', KEY).update(`client-${clientNo}`).digest('hex'));
      await expect(client.xadd('filtered', `${kept[0] ?? 0}-0`, 'event', '{}')).rejects.toThrow(/equal or smaller/);
      expect(running.report(new Date())[0]).toMatchObject({ name: 'bus', failing: null, stopped: null, position: kept.at(-1) });
    } finally {
      await running.close();
    }
  });

  it('killed -9 at random moments (25 times) while events are published: every event exactly once, in order', async () => {
    const stream = 'killed';
    const before = rig.feed.bounds().latest;
    const file = sinkFile(stream);
    const child = await publishWhileKilling(rig, file, 25);
    const latest = rig.feed.bounds().latest;
    try {
      await eventually(async () => (await client.xlen(stream)) === latest && true, 60_000, `stream ${stream} to hold ${latest} events`);
      const got = await entries(stream);
      // A new stream starts at the oldest event held: every event of the feed, once, in cursor order.
      const all = rig.feed.page(0, 100_000);
      if (all.gone) throw new Error('feed gone');
      expect(got.map((e) => e.id)).toEqual(all.events.map((e) => `${e.cursor}-0`));
      expect(got.map((e) => e.fields.event)).toEqual(all.events.map((e) => e.body));
      expect(latest).toBeGreaterThan(before);
    } finally {
      await killHard(child);
    }
  });

  it('holds every event while its Redis is down, names the sink as failing, and delivers them in order when it is back', async () => {
    const stream = 'outage';
    const sinks = parseSinks(sinkFile(stream), {});
    const running = startSinks(rig.feed, sinks, silentLogger);
    try {
      const latest = rig.feed.bounds().latest;
      await eventually(async () => (await client.xlen(stream)) === latest && true);
      await redis.kill();
      const held = rig.publish(30);
      const failing = await eventually(() => {
        const r = running.report(new Date())[0];
        return r?.failing !== null && r;
      });
      expect(failing.name).toBe('bus');
      expect(failing.eventsBehind).toBeGreaterThanOrEqual(30);
      // `status`, without the daemon, asks the destination itself: down, the sink is named and the exit is 1.
      writeFileSync(rig.dir.file('sinks.json'), JSON.stringify(sinkFile(stream)));
      const statusEnv = { MIRROR_DB: rig.dbPath, REDIS_URL: redis.url, SINKS_FILE: rig.dir.file('sinks.json') };
      const down = await runCli(['status', '--json'], statusEnv);
      expect(down.code).toBe(1);
      const downSinks = (JSON.parse(down.stdout) as { sinks: Array<{ name: string; problem: string | null }> }).sinks;
      expect(downSinks).toEqual([
        expect.objectContaining({ name: 'bus', problem: expect.stringMatching(/^destination failing/) as unknown }),
      ]);
      expect((await runCli(['status'], statusEnv)).stdout).toMatch(/^sink bus \(redis_stream, .*FAILING: destination failing/m);
      const listed = await runCli(['sinks'], statusEnv);
      expect(listed.code).toBe(1);
      expect(listed.stdout).toMatch(/^sink bus \(redis_stream, .*FAILING: destination failing/m);
      await redis.restart();
      await eventually(async () => {
        try {
          return (await client.xlen(stream)) === held.at(-1) && true;
        } catch {
          return false;
        }
      });
      const ids = (await entries(stream)).map((e) => Number(e.id.split('-')[0]));
      expect(ids).toEqual([...ids].sort((a, b) => a - b));
      expect(ids.slice(-30)).toEqual(held);
      await eventually(() => running.report(new Date())[0]?.failing === null);
      const up = JSON.parse((await runCli(['status', '--json'], statusEnv)).stdout) as { sinks: Array<Record<string, unknown>> };
      expect(up.sinks).toEqual([expect.objectContaining({ name: 'bus', problem: null, position: held.at(-1), eventsBehind: 0 })]);
      const again = await runCli(['sinks'], statusEnv);
      expect(again.code).toBe(0);
      expect(again.stdout).toBe(
        `sink bus (redis_stream, ${redis.url} stream ${stream}, policy pass:${sinks[0]?.policy.fingerprint ?? ''}): at cursor ${held.at(-1) ?? 0}, 0 events behind (0s)\n`,
      );
    } finally {
      await running.close();
    }
  });

  it('across a restore, goes on with mirror.restored above every cursor the lost file issued: no id reused, order kept', async () => {
    const stream = 'restored';
    const own = createFeedRig();
    try {
      own.publish(10);
      const backupPath = own.dir.file('backup.db');
      const backupCursor = copyDatabase(own.db, backupPath, 'mirror').mark?.backupCursor;
      expect(backupCursor).toBe(own.feed.latest());
      own.publish(5); // the lost file's: delivered, then gone with it
      const sinks = parseSinks(sinkFile(stream), {});
      const before = startSinks(own.feed, sinks, silentLogger);
      await eventually(async () => (await client.xlen(stream)) === 15 && true);
      await before.close();

      const restored = openMirror(backupPath);
      try {
        const mark = markRestore(restored, lastCursor(own.db), new Date());
        const after = startSinks(new ChangeFeed(restored), sinks, silentLogger);
        try {
          const got = await eventually(async () => {
            const e = await entries(stream);
            return e.length === 16 && e;
          });
          const last = got.at(-1);
          expect(last?.id).toBe(`${mark.cursorBase + 1}-0`);
          expect(last?.fields.type).toBe('mirror.restored');
          const ids = got.map((e) => Number(e.id.split('-')[0]));
          expect(ids).toEqual([...ids].sort((a, b) => a - b));
          expect(new Set(got.map((e) => e.fields.event_id)).size).toBe(16);
          expect(after.report(new Date())[0]).toMatchObject({ failing: null, stopped: null, position: mark.cursorBase + 1 });
        } finally {
          await after.close();
        }
      } finally {
        restored.close();
      }
    } finally {
      own.close();
    }
  });

  it("behind the feed's retention, says so and stops: it never jumps over the pruned events", async () => {
    const stream = 'behind';
    const own = createFeedRig();
    try {
      own.publish(6);
      const sinks = parseSinks(sinkFile(stream), {});
      const first = startSinks(own.feed, sinks, silentLogger);
      await eventually(async () => (await client.xlen(stream)) === 6 && true);
      await first.close();
      own.publish(6);
      // Retention without a hold (as an operator's hand could): events 7-12 go before this sink took them.
      expect(own.feed.prune(new Date(Date.now() + 60_000).toISOString(), 11)).toBe(11);
      const second = startSinks(own.feed, sinks, silentLogger);
      try {
        const stopped = await eventually(() => second.report(new Date())[0]?.stopped ?? undefined);
        expect(stopped).toMatch(/^behind the feed's retention: the destination holds cursor 6/);
        expect(await client.xlen(stream)).toBe(6);
      } finally {
        await second.close();
      }
    } finally {
      own.close();
    }
  });
});
